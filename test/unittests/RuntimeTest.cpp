//===- RuntimeTest.cpp - Runtime formats and conversions ------------------===//
//
// Part of moe-compiler. Expected values are hand-computed bit patterns and
// properties (round trips, every corruption rejected), not the code's own
// output.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Bundle.h"
#include "moe/runtime/CudaBackend.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Safetensors.h"
#include "moe_runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace moe::rt;

namespace {

TEST(RuntimeTest, Bf16Conversion) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(floatToBf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway too: ties to even rounds up here.
  EXPECT_EQ(floatToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(bf16ToFloat(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
}

TEST(RuntimeTest, F16Conversion) {
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(-0.5f), 0xb800);
  EXPECT_EQ(floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(floatToF16(1e6f), 0x7c00);                  // overflow to inf
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(f16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16ToFloat(0xfc00)));
}

// The bulk conversion: hand-computed patterns at both ends of a tensor
// large enough to be split over threads, and an element in each thread's
// share, must come out as the single-element conversions define them.
TEST(RuntimeTest, BulkConversionOverThreads) {
  const size_t n = (size_t(1) << 22) + 7; // several 1M-element shares
  Tensor x = Tensor::zeros(DType::F32, {static_cast<int64_t>(n)});
  float *v = x.as<float>();
  for (size_t i = 0; i < n; ++i)
    v[i] = 1.0f;
  v[0] = 1.00390625f;     // a tie: to even, 0x3f80
  v[n - 1] = 1.01171875f; // a tie: to even, 0x3f82
  v[n / 2] = -2.0f;       // 0xc000
  v[n / 3] = std::numeric_limits<float>::infinity(); // 0x7f80
  v[(n / 4) * 3] = std::nanf("");                    // stays a NaN
  Expected<Tensor> b = convertTensor(x, DType::BF16);
  ASSERT_TRUE(static_cast<bool>(b));
  const uint16_t *h = b->as<uint16_t>();
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(h[n - 1], 0x3f82);
  EXPECT_EQ(h[n / 2], 0xc000);
  EXPECT_EQ(h[n / 3], 0x7f80);
  EXPECT_TRUE(std::isnan(bf16ToFloat(h[(n / 4) * 3])));
  EXPECT_EQ(h[1], 0x3f80);
  EXPECT_EQ(h[n / 4 + 1], 0x3f80);
  // And back: every element of the bf16 tensor exactly.
  Expected<Tensor> f = convertTensor(*b, DType::F32);
  ASSERT_TRUE(static_cast<bool>(f));
  const float *w = f->as<float>();
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[n - 1], 1.015625f);
  EXPECT_EQ(w[n / 2], -2.0f);
  EXPECT_TRUE(std::isinf(w[n / 3]));
  EXPECT_TRUE(std::isnan(w[(n / 4) * 3]));
  size_t ones = 0;
  for (size_t i = 0; i < n; ++i)
    ones += w[i] == 1.0f;
  EXPECT_EQ(ones, n - 4); // all but the tie rounded up, -2, inf and NaN
}

TEST(RuntimeTest, StepChecksOverThreads) {
  // Several 1M-element chunks and a partial one.
  const int64_t n = (int64_t(1) << 22) + 13;
  Tensor x = Tensor::zeros(DType::F32, {n});
  float *v = x.as<float>();
  for (int64_t i = 0; i < n; ++i)
    v[i] = (i % 4 == 0) ? 0.5f : -2.0f; // squares 0.25 and 4, exact
  int64_t quarters = (n + 3) / 4;
  double expected = 0.25 * static_cast<double>(quarters) +
                    4.0 * static_cast<double>(n - quarters);
  for (int threads : {1, 2, 3, 8}) {
    EXPECT_EQ(sumOfSquares(v, n, threads), expected) << threads;
    EXPECT_TRUE(allFinite(x, nullptr, threads)) << threads;
  }
  // The first non-finite value is found wherever the threads split.
  int64_t late = n - 2, early = (int64_t(1) << 21) + 5;
  v[late] = std::numeric_limits<float>::infinity();
  v[early] = std::nanf("");
  for (int threads : {1, 2, 3, 8}) {
    int64_t first = -1;
    EXPECT_FALSE(allFinite(x, &first, threads)) << threads;
    EXPECT_EQ(first, early) << threads;
    EXPECT_TRUE(std::isnan(sumOfSquares(v, n, threads))) << threads;
  }
  // No elements: a sum of 0 and nothing non-finite.
  EXPECT_EQ(sumOfSquares(v, 0, 4), 0.0);
  EXPECT_TRUE(allFinite(Tensor::zeros(DType::F32, {0}), nullptr, 4));
}

TEST(RuntimeTest, ElementCountOverflow) {
  EXPECT_EQ(elementCount({2, 3, 4}), 24);
  EXPECT_EQ(elementCount({}), 1);
  EXPECT_FALSE(elementCount({-1, 4}).has_value());
  EXPECT_FALSE(elementCount({int64_t(1) << 40, int64_t(1) << 40}).has_value());
}

std::string tempPath(const char *name) {
  return ::testing::TempDir() + "/moe-runtime-test-" + name;
}

TEST(RuntimeTest, SafetensorsRoundTrip) {
  Tensor a = Tensor::zeros(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i)
    a.as<float>()[i] = 0.5f * i;
  Tensor b = Tensor::zeros(DType::I32, {4});
  b.as<int32_t>()[3] = -7;
  Tensor c = Tensor::zeros(DType::BF16, {0, 5});
  std::string path = tempPath("roundtrip.safetensors");
  ASSERT_TRUE(writeSafetensors(path, {{"a", a}, {"b", b}, {"c", c}}).ok());
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file) << file.message();
  Expected<Tensor> ra = file->get("a");
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ra->as<float>()[5], 2.5f);
  EXPECT_EQ(file->get("b")->as<int32_t>()[3], -7);
  EXPECT_EQ(file->get("c")->shape, (std::vector<int64_t>{0, 5}));
  EXPECT_FALSE(file->get("d"));
}

std::vector<uint8_t> sampleBundle() {
  Bundle bundle;
  bundle.manifest.target = "host";
  bundle.manifest.compiler = "test";
  bundle.manifest.entry = "entry";
  bundle.manifest.maxTokens = 8;
  bundle.manifest.layer.hidden = 4;
  bundle.manifest.inputs = {{"x", DType::F32, {-1, 4}}};
  bundle.manifest.parameters = {
      {"gate_weight", "experts.{i}.w1.weight", 2, DType::BF16, {2, 3, 4}}};
  bundle.manifest.schedule = {"entry"};
  bundle.blobs = {{1, 2, 3, 4, 5}, {}};
  return serializeBundle(bundle);
}

TEST(RuntimeTest, BundleRoundTrip) {
  Expected<Bundle> parsed = parseBundle(sampleBundle(), "sample");
  ASSERT_TRUE(parsed) << parsed.message();
  EXPECT_EQ(parsed->manifest.target, "host");
  EXPECT_EQ(parsed->manifest.maxTokens, 8);
  ASSERT_EQ(parsed->manifest.parameters.size(), 1u);
  EXPECT_EQ(parsed->manifest.parameters[0].name, "experts.{i}.w1.weight");
  EXPECT_EQ(parsed->manifest.parameters[0].dtype, DType::BF16);
  EXPECT_EQ(parsed->manifest.parameters[0].shape,
            (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(parsed->blobs.size(), 2u);
  EXPECT_EQ(parsed->blobs[0], (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(parsed->blobs[1].empty());
}

TEST(RuntimeTest, EveryBitFlipIsRejected) {
  std::vector<uint8_t> bytes = sampleBundle();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> damaged = bytes;
    damaged[i] ^= 0x01;
    EXPECT_FALSE(parseBundle(damaged, "damaged")) << "flip at byte " << i;
  }
}

TEST(RuntimeTest, EveryTruncationIsRejected) {
  std::vector<uint8_t> bytes = sampleBundle();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_FALSE(parseBundle(cut, "cut")) << "truncated to " << n;
  }
}

TEST(RuntimeTest, SafetensorsTruncationsAreRejected) {
  Tensor a = Tensor::zeros(DType::F16, {3, 3});
  std::string path = tempPath("truncate.safetensors");
  ASSERT_TRUE(writeSafetensors(path, {{"a", a}}).ok());
  Expected<std::vector<uint8_t>> bytes = readFile(path);
  ASSERT_TRUE(bytes);
  for (size_t n = 0; n < bytes->size(); ++n) {
    std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + n);
    EXPECT_FALSE(SafetensorsFile::parse(cut, "cut")) << "truncated to " << n;
  }
}

TEST(RuntimeTest, CApiReportsErrors) {
  EXPECT_EQ(moe_layer_load(nullptr, "host"), nullptr);
  EXPECT_NE(std::string(moe_last_error()).find("must not be NULL"),
            std::string::npos);
  EXPECT_EQ(moe_layer_load("/nonexistent/bundle.moeb", "host"), nullptr);
  EXPECT_NE(std::string(moe_last_error()).find("cannot open"),
            std::string::npos);
  EXPECT_EQ(moe_layer_forward(nullptr, nullptr, MOE_F32, 1, nullptr, nullptr,
                              nullptr),
            -1);
  EXPECT_EQ(moe_layer_hidden_size(nullptr), -1);
}

TEST(RuntimeTest, RandomIsDeterministicAndInRange) {
  moe::rt::Random a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    float x = a.uniform(-1.0f, 1.0f);
    EXPECT_EQ(x, b.uniform(-1.0f, 1.0f));
    EXPECT_GE(x, -1.0f);
    EXPECT_LT(x, 1.0f);
    differs |= x != c.uniform(-1.0f, 1.0f);
  }
  EXPECT_TRUE(differs);
}

// A generator moved ahead by skip(n) continues the stream at its n-th
// draw (random weights are drawn in chunks on several threads, each
// chunk's generator skipped to its first draw).
TEST(RuntimeTest, RandomSkipContinuesTheStream) {
  moe::rt::Random serial(7);
  std::vector<uint64_t> draws(300);
  for (uint64_t &d : draws)
    d = serial.next();
  for (uint64_t n : {0, 1, 2, 137, 299}) {
    moe::rt::Random skipped(7);
    skipped.skip(n);
    EXPECT_EQ(skipped.next(), draws[n]) << "skip(" << n << ")";
  }
  // Skips add up, and the state afterwards is the serial generator's.
  moe::rt::Random twice(7);
  twice.skip(100);
  twice.skip(200);
  EXPECT_EQ(twice.getState(), serial.getState());
}

} // namespace

// The packed gate/up weight, checked element by element against the
// layout the SwiGLU epilogue reads: within each block of 16 rows, 8 gate
// rows then the 8 up rows of the same FFN columns.
TEST(RuntimeTest, GateUpPacking) {
  const int64_t experts = 3, ffn = 24, hidden = 5;
  Tensor gate = Tensor::zeros(DType::F32, {experts, ffn, hidden});
  Tensor up = Tensor::zeros(DType::F32, {experts, ffn, hidden});
  for (int64_t i = 0; i < gate.numElements(); ++i) {
    gate.as<float>()[i] = static_cast<float>(i);
    up.as<float>()[i] = static_cast<float>(-1 - i);
  }
  AlignedBytes packed = packGateUp(gate, up);
  ASSERT_EQ(packed.size(), 2 * gate.data.size());
  const auto *p = reinterpret_cast<const float *>(packed.data());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t row = 0; row < 2 * ffn; ++row)
      for (int64_t h = 0; h < hidden; ++h) {
        bool isUp = (row % 16) >= 8;
        int64_t f = (row / 16) * 8 + row % 8;
        float expected =
            (isUp ? up : gate).as<float>()[(e * ffn + f) * hidden + h];
        ASSERT_EQ(p[(e * 2 * ffn + row) * hidden + h], expected)
            << "expert " << e << " row " << row << " column " << h;
      }
}

// A rank-2 weight (the shared experts) is one group.
TEST(RuntimeTest, GateUpPackingOneGroup) {
  Tensor gate = Tensor::zeros(DType::F32, {8, 2});
  Tensor up = Tensor::zeros(DType::F32, {8, 2});
  for (int i = 0; i < 16; ++i) {
    gate.as<float>()[i] = 1.0f + i;
    up.as<float>()[i] = 100.0f + i;
  }
  AlignedBytes packed = packGateUp(gate, up);
  const auto *p = reinterpret_cast<const float *>(packed.data());
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(p[15], 16.0f);
  EXPECT_EQ(p[16], 100.0f);
  EXPECT_EQ(p[31], 115.0f);
}

// The experts' gate and up biases [E, F] interleave as the weights' rows.
TEST(RuntimeTest, GateUpPackingBiases) {
  const int64_t experts = 2, ffn = 16;
  Tensor gate = Tensor::zeros(DType::F32, {experts, ffn});
  Tensor up = Tensor::zeros(DType::F32, {experts, ffn});
  for (int64_t i = 0; i < gate.numElements(); ++i) {
    gate.as<float>()[i] = static_cast<float>(i);
    up.as<float>()[i] = static_cast<float>(1000 + i);
  }
  AlignedBytes packed = packGateUp(gate, up, /*vectors=*/true);
  ASSERT_EQ(packed.size(), 2 * gate.data.size());
  const auto *p = reinterpret_cast<const float *>(packed.data());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t row = 0; row < 2 * ffn; ++row) {
      int64_t f = (row / 16) * 8 + row % 8;
      float expected = (row % 16 >= 8 ? 1000.0f : 0.0f) + e * ffn + f;
      EXPECT_EQ(p[e * 2 * ffn + row], expected) << "expert " << e << " row "
                                                << row;
    }
}

// An sm_90a manifest round-trips with its program, and a program that
// names an unknown buffer is rejected before any driver is touched.
TEST(RuntimeTest, GpuProgramRoundTripAndValidation) {
  Manifest m;
  m.target = "sm_90a";
  m.compiler = "test";
  m.maxTokens = 8;
  m.gpu.rowCapacity = 256;
  auto source = [](const char *text) {
    return *::moe::abi::parseBufferSource(text);
  };
  m.gpu.buffers = {
      {"x", DType::BF16, {-1, 64}, source("input")},
      {"rows", DType::BF16, {-2, 64}, source("scratch")},
      {"y", DType::BF16, {-1, 64}, source("output")},
      {"topk_ids", DType::I32, {-1, 2}, source("output")},
      {"topk_weights", DType::F32, {-1, 2}, source("output")},
      {"w13", DType::BF16, {4, 16, 64}, source("pack:gate_weight,up_weight")}};
  GpuStep launch;
  launch.kind = ::moe::abi::StepKind::Launch;
  launch.kernel = "k";
  launch.kernelKind = ::moe::abi::KernelKind::GroupedGemm;
  launch.args = {"x", "rows"};
  launch.grid = ::moe::abi::GridKind::Persistent;
  launch.gridSize = 112;
  launch.block = 384;
  launch.sharedMemory = 229376;
  launch.tensorMaps = {{2, 0, {-1, 64}, {128, 64}, 128}};
  m.gpu.steps = {launch};
  m.gpu.tileM = 128;
  GpuVariant small;
  small.tileM = 64;
  small.maxTokens = 4;
  small.rowCapacity = 192;
  small.blob = 2;
  small.steps = {launch};
  small.steps[0].args = {"rows", "x"};
  small.steps[0].block = 256;
  m.gpu.variants = {small};
  Expected<Manifest> back = parseManifest(serializeManifest(m));
  ASSERT_TRUE(static_cast<bool>(back)) << back.message();
  ASSERT_EQ(back->gpu.steps.size(), 1u);
  EXPECT_EQ(back->gpu.rowCapacity, 256);
  // The 64-row build: its fields, and its steps resolved against the
  // program's buffers.
  EXPECT_EQ(back->gpu.tileM, 128);
  ASSERT_EQ(back->gpu.variants.size(), 1u);
  const GpuVariant &v = back->gpu.variants[0];
  EXPECT_EQ(v.tileM, 64);
  EXPECT_EQ(v.maxTokens, 4);
  EXPECT_EQ(v.rowCapacity, 192);
  EXPECT_EQ(v.blob, 2);
  ASSERT_EQ(v.steps.size(), 1u);
  EXPECT_EQ(v.steps[0].block, 256);
  EXPECT_EQ(v.steps[0].argIds, (std::vector<int32_t>{1, 0}));
  m.gpu.variants.clear();
  EXPECT_EQ(back->gpu.buffers[1].shape, (std::vector<int64_t>{-2, 64}));
  EXPECT_EQ(back->gpu.steps[0].tensorMaps[0].box,
            (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(back->gpu.steps[0].sharedMemory, 229376);
  EXPECT_EQ(back->gpu.steps[0].kind, ::moe::abi::StepKind::Launch);
  EXPECT_EQ(back->gpu.steps[0].grid, ::moe::abi::GridKind::Persistent);
  EXPECT_EQ(back->gpu.steps[0].kernelKind, ::moe::abi::KernelKind::GroupedGemm);
  // The reader resolves the buffers once: x and rows are buffers 0 and 1.
  EXPECT_EQ(back->gpu.steps[0].argIds, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(back->gpu.buffers[5].source.kind, ::moe::abi::SourceKind::Pack);
  EXPECT_EQ(back->gpu.buffers[5].source.role, "gate_weight");
  EXPECT_EQ(back->gpu.buffers[5].source.upRole, "up_weight");

  // What the reader refuses: a step or a source it has no kind for.
  std::string text = serializeManifest(m);
  auto replaced = [&](const std::string &from, const std::string &to) {
    std::string t = text;
    size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  Expected<Manifest> badStep =
      parseManifest(replaced("\"op\": \"launch\"", "\"op\": \"jump\""));
  ASSERT_FALSE(static_cast<bool>(badStep));
  EXPECT_NE(badStep.message().find("unknown gpu step 'jump'"),
            std::string::npos)
      << badStep.message();
  Expected<Manifest> badGrid = parseManifest(
      replaced("\"grid\": \"persistent\"", "\"grid\": \"everywhere\""));
  ASSERT_FALSE(static_cast<bool>(badGrid));
  EXPECT_NE(badGrid.message().find("kernel 'k' has unknown grid 'everywhere'"),
            std::string::npos)
      << badGrid.message();
  Expected<Manifest> badKind = parseManifest(replaced(
      "\"kernel_kind\": \"grouped_gemm\"", "\"kernel_kind\": \"matmul\""));
  ASSERT_FALSE(static_cast<bool>(badKind));
  EXPECT_NE(badKind.message().find("kernel 'k' has unknown kind 'matmul'"),
            std::string::npos)
      << badKind.message();
  // A bundle written before kernel kinds reads as kind other.
  {
    std::string old = text;
    size_t at = old.find("\"kernel_kind\": \"grouped_gemm\",");
    ASSERT_NE(at, std::string::npos);
    old.erase(at, std::string("\"kernel_kind\": \"grouped_gemm\",").size());
    Expected<Manifest> before = parseManifest(old);
    ASSERT_TRUE(static_cast<bool>(before)) << before.message();
    EXPECT_EQ(before->gpu.steps[0].kernelKind, ::moe::abi::KernelKind::Other);
  }
  Expected<Manifest> badSource =
      parseManifest(replaced("\"scratch\"", "\"weights\""));
  ASSERT_FALSE(static_cast<bool>(badSource));
  EXPECT_NE(badSource.message().find(
                "gpu buffer 'rows' has unknown source 'weights'"),
            std::string::npos)
      << badSource.message();

  // A host bundle's manifest made sm_90a with a bad program.
  m.layer.hidden = 64;
  m.layer.experts = 4;
  m.layer.topK = 2;
  m.inputs = {{"x", DType::BF16, {-1, 64}}};
  m.outputs = {{"y", DType::F32, {-1, 64}},
               {"topk_ids", DType::I32, {-1, 2}},
               {"topk_weights", DType::F32, {-1, 2}}};
  m.gpu.steps[0].args = {"x", "nowhere"};
  Status s = validateManifest(m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("kernel 'k' takes unknown buffer 'nowhere'"),
            std::string::npos)
      << s.error;
}

// The one parser of a buffer's source: every form, and what it refuses.
TEST(RuntimeTest, BufferSourceParser) {
  for (const char *text : {"input", "output", "scratch", "tokens",
                           "param:router_weight", "pack:gate_weight,up_weight",
                           "concat:gate_scale,up_scale", "arg:x.grad"}) {
    std::optional<::moe::abi::BufferSource> s =
        ::moe::abi::parseBufferSource(text);
    ASSERT_TRUE(s.has_value()) << text;
    EXPECT_EQ(::moe::abi::formatBufferSource(*s), text);
  }
  std::optional<::moe::abi::BufferSource> concat =
      ::moe::abi::parseBufferSource("concat:gate_scale,up_scale");
  EXPECT_EQ(concat->kind, ::moe::abi::SourceKind::Concat);
  EXPECT_EQ(concat->role, "gate_scale");
  EXPECT_EQ(concat->upRole, "up_scale");
  EXPECT_TRUE(concat->fromCheckpoint());
  EXPECT_FALSE(::moe::abi::parseBufferSource("arg:x")->fromCheckpoint());
  EXPECT_EQ(::moe::abi::parseBufferSource("tokens")->kind,
            ::moe::abi::SourceKind::Tokens);
  for (const char *text :
       {"", "weights", "param:", "arg:", "param:a,b", "pack:gate", "pack:,up",
        "pack:gate,", "concat:a,b,c", "Input", "input:x", "tokens:x"})
    EXPECT_FALSE(::moe::abi::parseBufferSource(text).has_value()) << text;
}
