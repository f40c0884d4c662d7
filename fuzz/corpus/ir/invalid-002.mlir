// expected-error @+1 {{expected 0 < ffn <= 2147483647, got 4294967296}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4294967296, dtype = f32>}
