// expected-error @+1 {{expected top_k <= topk_groups * experts per group (1 * 2 = 2), got 3}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 3, groups = 2, topk_groups = 1>}
