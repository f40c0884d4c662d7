// expected-error @+2 {{expected 'true' or 'false'}}
// expected-error @+1 {{failed to parse Moe_LayerConfigAttr parameter 'score_bias' which is to be a `bool`}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, score_bias = yes>}
