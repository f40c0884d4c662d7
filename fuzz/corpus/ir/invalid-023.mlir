// expected-error @+1 {{unknown moe dialect attribute 'moe.partition'}}
func.func private @f() attributes {moe.partition = #moe.sm_partition<sms = 132, comm = 20>}
