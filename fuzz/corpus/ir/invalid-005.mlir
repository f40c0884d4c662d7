// expected-error @+1 {{expected groups to divide experts (4), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, groups = 3>}
