#include <gtest/gtest.h>

#include "hub/hub.h"

namespace deepinfer {
namespace {

TEST(HubTest, ParsesReferences) {
  HubRef r;
  ASSERT_TRUE(ParseHubRef("owner/name", &r));
  EXPECT_EQ(r.repo, "owner/name");
  EXPECT_EQ(r.file, "");
  EXPECT_EQ(r.revision, "main");
  ASSERT_TRUE(ParseHubRef("hf://ggml-org/models:tinyllamas/stories260K.gguf@v1.0", &r));
  EXPECT_EQ(r.repo, "ggml-org/models");
  EXPECT_EQ(r.file, "tinyllamas/stories260K.gguf");
  EXPECT_EQ(r.revision, "v1.0");
  ASSERT_TRUE(ParseHubRef("Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", &r));
  EXPECT_EQ(r.repo, "Qwen/Qwen3-0.6B-GGUF");
  EXPECT_EQ(r.file, "Qwen3-0.6B-Q8_0.gguf");
}

TEST(HubTest, RejectsBadReferences) {
  HubRef r;
  EXPECT_FALSE(ParseHubRef("justaname", &r));
  EXPECT_FALSE(ParseHubRef("owner/name:../../etc/passwd", &r));
  EXPECT_FALSE(ParseHubRef("owner/name:/abs", &r));
  EXPECT_FALSE(ParseHubRef("-x/name", &r));
  EXPECT_FALSE(ParseHubRef("owner/na me", &r));
}

TEST(HubTest, OfflineMissReportsTheCache) {
  HubOptions o;
  o.cache_dir = "/nonexistent/deepinfer-cache";
  o.offline = true;
  HubRef r;
  ASSERT_TRUE(ParseHubRef("owner/name", &r));
  auto p = Pull(r, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("HF_HUB_OFFLINE"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
