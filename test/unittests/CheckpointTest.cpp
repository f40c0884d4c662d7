//===- CheckpointTest.cpp - Checkpoints under damage ----------------------===//
//
// Part of moe-compiler. SHA-256 against the FIPS 180-4 example vectors, and
// a thousand seeded mutations of a checkpoint: whatever a mutation does,
// reading the newest valid checkpoint gives either exactly what was written
// (the mutated one, when the mutation changed nothing that matters, or the
// older one it falls back to) or one error, never other or non-finite
// state; and the older checkpoint stays valid on disk.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Layer.h"
#include "moe/runtime/Train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sys/stat.h>

using namespace moe::rt;

namespace {

std::string sha256(const std::string &text) {
  Sha256 hash;
  hash.update(text.data(), text.size());
  return hash.hexDigest();
}

TEST(CheckpointTest, Sha256KnownAnswers) {
  EXPECT_EQ(sha256(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces (the buffering across blocks).
  Sha256 hash;
  std::string piece(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, piece.size());
    hash.update(piece.data(), n);
    left -= n;
  }
  EXPECT_EQ(hash.hexDigest(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CheckpointTest, JsonDepth) {
  std::string ok = std::string(256, '[') + std::string(256, ']');
  EXPECT_TRUE(checkJsonDepth(ok.data(), ok.size(), "x").ok());
  std::string deep = "{\"a\": " + std::string(257, '[');
  EXPECT_EQ(checkJsonDepth(deep.data(), deep.size(), "x").error,
            "x: JSON nested deeper than 256 levels (at byte 261)");
  // Brackets inside strings (escaped quotes included) do not count.
  std::string quoted = "[\"" + std::string(300, '[') + "\\\"" +
                       std::string(300, '{') + "\"]";
  EXPECT_TRUE(checkJsonDepth(quoted.data(), quoted.size(), "x").ok());
}

std::string freshDir(const char *name) {
  std::string dir = ::testing::TempDir() + "/moe-checkpoint-test-" + name;
  std::string command = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

std::map<std::string, Tensor> stateOf(float base) {
  std::map<std::string, Tensor> state;
  state["w"] = Tensor::zeros(DType::F32, {3, 4});
  state["w.m"] = Tensor::zeros(DType::F32, {3, 4});
  state["b"] = Tensor::zeros(DType::F32, {5});
  for (auto &[name, t] : state)
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.as<float>()[i] = base + 0.25f * static_cast<float>(i);
  return state;
}

bool sameState(const std::map<std::string, Tensor> &a,
               const std::map<std::string, Tensor> &b) {
  if (a.size() != b.size())
    return false;
  for (const auto &[name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.shape != t.shape ||
        it->second.data != t.data)
      return false;
  }
  return true;
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(CheckpointTest, RoundTripAndRefusals) {
  std::string dir = freshDir("roundtrip");
  std::map<std::string, Tensor> state = stateOf(1.0f);
  ASSERT_TRUE(writeCheckpointState(dir, state, 12, 99).ok());
  Expected<ValidCheckpoint> read = readValidCheckpoint(dir, stateSpecs(state));
  ASSERT_TRUE(read) << read.message();
  EXPECT_EQ(read->step, 12);
  EXPECT_EQ(read->stream, 99u);
  EXPECT_TRUE(sameState(read->tensors, state));
  // Non-finite state and a negative step are never written.
  std::map<std::string, Tensor> bad = state;
  bad["b"].as<float>()[2] = std::nanf("");
  Status s = writeCheckpointState(dir, bad, 13, 0);
  EXPECT_EQ(s.error, "refusing to write a checkpoint of step 13: 'b' holds "
                     "non-finite values");
  EXPECT_FALSE(writeCheckpointState(dir, state, -5, 0).ok());
  struct stat st;
  EXPECT_NE(::stat((dir + "/step-000000000013").c_str(), &st), 0);
}

TEST(CheckpointTest, MutationsNeverResumeIntoOtherState) {
  std::string dir = freshDir("mutations");
  std::map<std::string, Tensor> older = stateOf(1.0f), newer = stateOf(2.0f);
  ASSERT_TRUE(writeCheckpointState(dir, older, 5, 555).ok());
  ASSERT_TRUE(writeCheckpointState(dir, newer, 10, 1010).ok());
  std::string ckpt = dir + "/step-000000000010";
  const std::string files[] = {ckpt + "/state.safetensors",
                               ckpt + "/COMPLETE"};
  std::string original[2] = {readAll(files[0]), readAll(files[1])};
  auto specs = stateSpecs(newer);
  Random rng(2024);
  int resumedNewer = 0, fellBack = 0, refused = 0;
  for (int round = 0; round < 1000; ++round) {
    // Restore the newer checkpoint under its name, then damage it: flip,
    // overwrite or insert bytes, or truncate, in one of its two files.
    // (A fallback renamed the last one aside.)
    ASSERT_EQ(std::system(("rm -rf '" + ckpt + "'*").c_str()), 0);
    ASSERT_EQ(::mkdir(ckpt.c_str(), 0755), 0);
    int which = static_cast<int>(rng.next() % 2);
    std::string bytes = original[which];
    writeAll(files[1 - which], original[1 - which]);
    int kind = static_cast<int>(rng.next() % 4);
    size_t at = bytes.empty() ? 0 : rng.next() % bytes.size();
    if (kind == 0 && !bytes.empty())
      bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng.next() % 8)));
    else if (kind == 1 && !bytes.empty())
      bytes[at] = static_cast<char>(rng.next());
    else if (kind == 2)
      bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                   static_cast<char>(rng.next()));
    else
      bytes.resize(at);
    writeAll(files[which], bytes);
    Expected<ValidCheckpoint> read = readValidCheckpoint(dir, specs);
    if (!read) {
      // Refusing is allowed: a mutation can make an intact-looking record
      // of another job (other ranks, another format version), which is an
      // error rather than a reason to fall back.
      ASSERT_FALSE(read.message().empty());
      ++refused;
      continue;
    }
    for (const auto &[name, t] : read->tensors)
      for (int64_t i = 0; i < t.numElements(); ++i)
        ASSERT_TRUE(std::isfinite(t.as<float>()[i]));
    if (read->step == 10) {
      // Only a change that leaves the meaning intact (JSON spacing, say).
      ASSERT_EQ(read->stream, 1010u) << "round " << round;
      ASSERT_TRUE(sameState(read->tensors, newer)) << "round " << round;
      ++resumedNewer;
    } else {
      ASSERT_EQ(read->step, 5) << "round " << round;
      ASSERT_EQ(read->stream, 555u);
      ASSERT_TRUE(sameState(read->tensors, older));
      ASSERT_EQ(read->damaged.size(), 1u);
      ++fellBack;
    }
  }
  // Nearly every mutation is caught; the older checkpoint survived all.
  EXPECT_GT(fellBack, 900);
  EXPECT_LT(refused, 50);
  EXPECT_EQ(resumedNewer + fellBack + refused, 1000);
  ASSERT_EQ(std::system(("rm -rf '" + ckpt + "'*").c_str()), 0);
  Expected<ValidCheckpoint> last = readValidCheckpoint(dir, specs, nullptr,
                                                       /*strict=*/true);
  ASSERT_TRUE(last) << last.message();
  EXPECT_EQ(last->step, 5);
  EXPECT_TRUE(sameState(last->tensors, older));
}

} // namespace
