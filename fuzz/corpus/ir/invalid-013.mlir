// expected-error @+1 {{expected shared_experts * shared_ffn <= 2147483647, got 4000000000}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, shared_experts = 2, shared_ffn = 2000000000>}
