// expected-error @+1 {{expected a finite routed_scale > 0, got 0}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, routed_scale = 0.0>}
