// expected-error @+1 {{expected shared_gate = false without shared experts}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_gate = true>}
