// The graph registry: SHA-256 test vectors, canonical fingerprints, the
// bounded LRU and fingerprint resolution.
#include "server/graph_registry.h"

#include <algorithm>
#include <string>

#include "adapter/graph_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/bytes_lru.h"
#include "tests/unit/test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

// x -> y -> loss, with a parameter w.
v1::Graph SmallGraph() {
  v1::Graph graph;
  graph.set_name("small");
  for (const char* id : {"x", "w", "y", "loss"}) {
    v1::Tensor* t = graph.add_tensors();
    t->set_id(id);
    t->set_size_bytes(64);
  }
  graph.mutable_tensors(1)->set_role(v1::TENSOR_ROLE_PARAMETER);
  v1::Op* mm = graph.add_ops();
  mm->set_id("mm");
  mm->set_op_type("aten::mm");
  mm->add_input_ids("x");
  mm->add_input_ids("w");
  mm->add_output_ids("y");
  (*mm->mutable_attributes())["a"] = "1";
  (*mm->mutable_attributes())["b"] = "2";
  v1::Op* sum = graph.add_ops();
  sum->set_id("sum");
  sum->add_input_ids("y");
  sum->add_output_ids("loss");
  return graph;
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(FingerprintTest, TensorOrderAndMapOrderDoNotMatter) {
  const v1::Graph graph = SmallGraph();
  const std::string fingerprint = GraphFingerprint(graph);
  EXPECT_EQ(fingerprint.size(), 64u);
  v1::Graph shuffled = graph;
  std::reverse(shuffled.mutable_tensors()->begin(),
               shuffled.mutable_tensors()->end());
  EXPECT_EQ(GraphFingerprint(shuffled), fingerprint);
  // The same attributes inserted in the other order (another client).
  v1::Graph other = graph;
  other.mutable_ops(0)->mutable_attributes()->clear();
  (*other.mutable_ops(0)->mutable_attributes())["b"] = "2";
  (*other.mutable_ops(0)->mutable_attributes())["a"] = "1";
  EXPECT_EQ(GraphFingerprint(other), fingerprint);
  // Through a serialization round trip (what two clients send).
  v1::Graph parsed;
  ASSERT_TRUE(parsed.ParseFromString(shuffled.SerializeAsString()));
  EXPECT_EQ(GraphFingerprint(parsed), fingerprint);
}

TEST(FingerprintTest, WhatChangesTheAnswerChangesTheFingerprint) {
  const v1::Graph graph = SmallGraph();
  const std::string fingerprint = GraphFingerprint(graph);
  v1::Graph bigger = graph;
  bigger.mutable_tensors(2)->set_size_bytes(65);
  EXPECT_NE(GraphFingerprint(bigger), fingerprint);
  v1::Graph reordered = graph;
  reordered.mutable_ops(0)->mutable_input_ids()->SwapElements(0, 1);
  EXPECT_NE(GraphFingerprint(reordered), fingerprint);
  v1::Graph attribute = graph;
  (*attribute.mutable_ops(0)->mutable_attributes())["a"] = "3";
  EXPECT_NE(GraphFingerprint(attribute), fingerprint);
}

TEST(BytesLruTest, EvictsLeastRecentlyUsedByBytes) {
  BytesLru<int> lru(100, std::nullopt);
  EXPECT_TRUE(lru.Insert("a", 1, 40));
  EXPECT_TRUE(lru.Insert("b", 2, 40));
  EXPECT_EQ(lru.Find("a"), 1);  // a is now the most recent
  EXPECT_TRUE(lru.Insert("c", 3, 40));
  EXPECT_FALSE(lru.Find("b").has_value());  // b was evicted
  EXPECT_EQ(lru.Find("a"), 1);
  EXPECT_EQ(lru.Find("c"), 3);
  CacheStats stats = lru.stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.bytes, 80);
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.evictions, 1);
  // Too large alone: refused, nothing evicted.
  EXPECT_FALSE(lru.Insert("huge", 4, 101));
  EXPECT_EQ(lru.stats().entries, 2);
  // Replacing an entry recharges it.
  EXPECT_TRUE(lru.Insert("a", 5, 10));
  EXPECT_EQ(lru.stats().bytes, 50);
  EXPECT_EQ(lru.Find("a"), 5);
}

TEST(GraphRegistryTest, ResolvesRegisteredFingerprints) {
  GraphRegistry registry(1 << 20, 1 << 20, nullptr);
  const v1::Graph graph = SmallGraph();
  const GraphRegistry::Registration first =
      testing::ValueOrFail(registry.Register(graph));
  EXPECT_TRUE(first.newly_registered);
  EXPECT_GT(first.charged_bytes, 0);
  const GraphRegistry::Registration again =
      testing::ValueOrFail(registry.Register(graph));
  EXPECT_FALSE(again.newly_registered);
  // The registered graph itself, not a second conversion of it.
  EXPECT_EQ(again.ref.graph.get(), first.ref.graph.get());
  EXPECT_EQ(again.charged_bytes, first.charged_bytes);
  const GraphRef ref =
      testing::ValueOrFail(registry.Resolve(nullptr, first.ref.fingerprint));
  EXPECT_EQ(ref.graph->num_ops(), 2);
  EXPECT_EQ(registry.graph_stats().entries, 1);

  const absl::StatusOr<GraphRef> both =
      registry.Resolve(&graph, first.ref.fingerprint);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<GraphRef> neither = registry.Resolve(nullptr, "");
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<GraphRef> unknown = registry.Resolve(nullptr, "feed");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'feed'"));
}

TEST(GraphRegistryTest, EvictedGraphsAreNotFound) {
  v1::Graph a = SmallGraph();
  v1::Graph b = SmallGraph();
  b.set_name("other");
  const int64_t one =
      GraphMemoryBytes(testing::ValueOrFail(adapter::GraphFromProto(a)));
  GraphRegistry registry(one + one / 2, 1 << 20, nullptr);
  const std::string fa =
      testing::ValueOrFail(registry.Register(a)).ref.fingerprint;
  const std::string fb =
      testing::ValueOrFail(registry.Register(b)).ref.fingerprint;
  EXPECT_NE(fa, fb);
  const absl::StatusOr<GraphRef> evicted = registry.Resolve(nullptr, fa);
  EXPECT_EQ(evicted.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(evicted.status().message(), HasSubstr(fa));
  EXPECT_TRUE(registry.Resolve(nullptr, fb).ok());
  EXPECT_EQ(registry.graph_stats().evictions, 1);

  GraphRegistry tiny(16, 1 << 20, nullptr);
  EXPECT_EQ(tiny.Register(a).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace echo::server
