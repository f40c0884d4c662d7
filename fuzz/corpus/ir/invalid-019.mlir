// expected-error @+1 {{expected 0 < sms <= 65536, got 0}}
func.func private @f() attributes {c = #moe.sm_partition<sms = 0, comm = 0>}
