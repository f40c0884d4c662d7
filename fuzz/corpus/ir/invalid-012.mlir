// expected-error @+1 {{expected 0 < shared_ffn <= 2147483647, got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_experts = 1>}
