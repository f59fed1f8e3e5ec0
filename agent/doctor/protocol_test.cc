#include "agent/doctor/protocol.h"

#include <gtest/gtest.h>

#include <random>

#include "agent/base/utf8.h"

namespace fabric::doctor {
namespace {

std::string EscapeForTest(const std::string& s) { return EscapeBytes(s); }

NodeInfo Sample() {
  return NodeInfo{"node-a",
                  0x1234567890abcdefull,
                  {{"rdmap79s0", "efa", std::string("\x00\x01\x02\xff", 4)},
                   {"rdmap80s0", "efa", std::string(32, 'x')}}};
}

TEST(ControlProtocol, RoundTripsQueryAndInfo) {
  for (ControlType t : {ControlType::kQuery, ControlType::kInfo}) {
    ControlMessage m{t, Sample(), ""};
    auto enc = EncodeControl(m);
    ASSERT_TRUE(enc.ok());
    auto dec = DecodeControl(*enc);
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(dec->type, t);
    EXPECT_EQ(dec->info, m.info);
  }
}

TEST(ControlProtocol, OtherVersionIsFailedPreconditionNotGarbage) {
  auto enc = EncodeControl({ControlType::kQuery, Sample(), ""});
  ASSERT_TRUE(enc.ok());
  std::string other = *enc;
  other[4] = 9;
  auto dec = DecodeControl(other);
  EXPECT_TRUE(absl::IsFailedPrecondition(dec.status())) << dec.status();
}

TEST(ControlProtocol, EveryTruncationAndTrailingByteIsRejected) {
  auto enc = EncodeControl({ControlType::kInfo, Sample(), ""});
  ASSERT_TRUE(enc.ok());
  for (size_t n = 0; n < enc->size(); ++n) {
    EXPECT_FALSE(DecodeControl(enc->substr(0, n)).ok()) << "prefix " << n;
  }
  EXPECT_FALSE(DecodeControl(*enc + "x").ok());
}

TEST(ControlProtocol, RefusesOversizedFields) {
  NodeInfo big = Sample();
  big.devices[0].name = std::string(kMaxEndpointName + 1, 'n');
  EXPECT_FALSE(EncodeControl({ControlType::kInfo, big, ""}).ok());
  NodeInfo many = Sample();
  many.devices.resize(kMaxDevices + 1, many.devices[0]);
  EXPECT_FALSE(EncodeControl({ControlType::kInfo, many, ""}).ok());
}

// Issue 19: names and error text from a peer reach JSON and Prometheus; bytes
// that are not clean text (ill-formed UTF-8, control characters) are rejected
// where they enter, with their own reason.
TEST(ControlProtocol, RejectsNamesThatAreNotCleanText) {
  const std::string bad[] = {"\xff\xfe", "caf\xc3",  "a\nb",        std::string("a\0b", 3),
                             "x\x7f",    "\xc2\x85", "\xed\xa0\x80"};
  for (const std::string& b : bad) {
    // Encoded with a placeholder of the same length, then patched, so the
    // encoder's own checks do not stop the frame before the decoder sees it.
    const std::string placeholder(b.size(), 'Z');
    auto patch = [&](NodeInfo info) {
      ControlMessage m{ControlType::kInfo, std::move(info), ""};
      auto enc = EncodeControl(m);
      EXPECT_TRUE(enc.ok()) << enc.status();
      std::string out = enc.value_or("");
      size_t at = out.find(placeholder);
      EXPECT_NE(at, std::string::npos);
      if (at != std::string::npos) out.replace(at, b.size(), b);
      return out;
    };
    NodeInfo node = Sample();
    node.node = placeholder;
    NodeInfo device = Sample();
    device.devices[1].device = placeholder;
    NodeInfo provider = Sample();
    provider.devices[0].provider = placeholder;
    for (const std::string& payload : {patch(node), patch(device), patch(provider)}) {
      auto dec = DecodeControl(payload);
      ASSERT_FALSE(dec.ok()) << EscapeForTest(b);
      EXPECT_TRUE(absl::IsInvalidArgument(dec.status())) << dec.status();
      EXPECT_EQ(ControlRejectReason(dec.status()), "control_bad_name") << dec.status();
      EXPECT_TRUE(IsValidUtf8(dec.status().message())) << EscapeForTest(b);
    }
    // The error text of an Error frame is held to the same rule.
    std::string err = std::string("FDOC\x01\x03", 6);
    err.push_back(0);
    err.push_back(static_cast<char>(b.size()));
    err += b;
    auto dec = DecodeControl(err);
    ASSERT_FALSE(dec.ok()) << EscapeForTest(b);
    EXPECT_EQ(ControlRejectReason(dec.status()), "control_bad_name");
  }
  // Clean UTF-8 (not only ASCII) still decodes.
  NodeInfo utf8 = Sample();
  utf8.node =
      "n\xc3\xb6"
      "de-\xe2\x82\xac";
  auto enc = EncodeControl({ControlType::kQuery, utf8, ""});
  ASSERT_TRUE(enc.ok());
  auto dec = DecodeControl(*enc);
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_EQ(dec->info.node, utf8.node);
}

TEST(ControlProtocol, GarbageAndVersionHaveTheirOwnReasons) {
  EXPECT_EQ(ControlRejectReason(DecodeControl("nope").status()), "control_garbage");
  auto enc = EncodeControl({ControlType::kQuery, Sample(), ""});
  ASSERT_TRUE(enc.ok());
  std::string other = *enc;
  other[4] = 9;
  EXPECT_EQ(ControlRejectReason(DecodeControl(other).status()), "control_version");
}

TEST(ControlProtocol, EncoderRefusesWhatPeersWouldReject) {
  NodeInfo bad = Sample();
  bad.node = "\xff";
  EXPECT_FALSE(EncodeControl({ControlType::kQuery, bad, ""}).ok());
}

TEST(ControlProtocol, RandomBytesNeverDecodeOrCrash) {
  std::mt19937 rng(7);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    if (i % 2 == 0 && s.size() >= 6) s.replace(0, 6, std::string("FDOC\x01\x02", 6));
    decoded += DecodeControl(s).ok();
  }
  EXPECT_EQ(decoded, 0);
}

TEST(ControlProtocol, FrameIsBigEndianLength) {
  std::string f = Frame("abc");
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f.substr(0, 4), std::string("\0\0\0\x03", 4));
}

TEST(ProbeProtocol, RoundTripAndRejections) {
  char buf[kMaxProbeMessage];
  ProbeMessage m{ProbeKind::kReply, 42, std::string(28, 'a')};
  size_t n = EncodeProbe(m, buf);
  auto dec = DecodeProbe(buf, n);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, m);
  EXPECT_FALSE(DecodeProbe(buf, n - 1).ok());
  buf[0] = 'X';
  EXPECT_FALSE(DecodeProbe(buf, n).ok());
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    char r[kMaxProbeMessage + 8];
    size_t len = rng() % sizeof(r);
    for (size_t k = 0; k < len; ++k) r[k] = static_cast<char>(rng());
    if (len >= 4) std::memcpy(r, "FDPB", 4);
    auto d = DecodeProbe(r, len);
    if (d.ok()) {  // only a structurally exact message may pass
      EXPECT_EQ(len, kProbeHeader + d->sender.size());
    }
  }
}

}  // namespace
}  // namespace fabric::doctor
