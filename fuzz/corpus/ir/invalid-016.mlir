// expected-error @+1 {{expected dtype to be f32, bf16 or f16, got 'i8'}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4, dtype = i8>}
