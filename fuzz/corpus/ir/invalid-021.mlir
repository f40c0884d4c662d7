// expected-error @+1 {{expected 0 <= comm < sms (132), got -1}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 132, comm = -1>}
