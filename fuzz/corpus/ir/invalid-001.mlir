// expected-error @+1 {{expected 0 < experts <= 2147483647, got -4}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = -4, top_k = 1, ffn = 4, dtype = f32>}
