// expected-error @+1 {{expected 1 <= top_k <= experts (4), got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 0>}
