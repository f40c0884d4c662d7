// expected-error @+1 {{expected at least 2 experts per group with group_score = sum_top2, got 1}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, groups = 4, topk_groups = 2, group_score = sum_top2>}
