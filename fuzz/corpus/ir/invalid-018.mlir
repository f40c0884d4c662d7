// expected-error @+2 {{expected one of softmax, sigmoid, got 'relu'}}
// expected-error @+1 {{failed to parse Moe_LayerConfigAttr parameter 'scoring' which is to be a `::mlir::moe::ScoringFunc`}}
func.func private @f() attributes {c = #moe.layer_config<hidden = 8, experts = 4, ffn = 4, dtype = f32, top_k = 1, scoring = relu>}
