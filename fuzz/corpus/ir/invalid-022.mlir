// expected-error @+1 {{expected 'moe.sm_partition' to be a #moe.sm_partition attribute, got 20 : i64}}
func.func private @f() attributes {moe.sm_partition = 20 : i64}
