// expected-error @+1 {{expected shared_ffn = 0 without shared experts, got 16}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_ffn = 16>}
