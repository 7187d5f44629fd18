// decode_tokens: u16/u32 little-endian, .npy arrays as numpy writes them,
// byte text; bad payloads come back as one-line errors, never as a throw or
// an out-of-bounds read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/token_decode.h"

namespace trainbench {
namespace {

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

// An .npy payload the way numpy.save writes it: magic, version, header length,
// the dict padded with spaces to a multiple of 64 and ended by '\n', then data.
std::vector<uint8_t> npy(const std::string& descr, const std::string& shape,
                         const std::string& data, int major = 1,
                         const std::string& fortran_order = "False") {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + fortran_order +
                       ", 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes_of(out + header + data);
}

struct Decoded {
  bool ok;
  std::vector<int32_t> tokens;
  std::string error;
};

Decoded decode(TokenFormat format, const std::vector<uint8_t>& payload, int64_t vocab = 50257) {
  Decoded result;
  result.tokens = {-7};  // decoding appends after what is there
  result.ok =
      decode_tokens(format, payload.data(), payload.size(), vocab, &result.tokens, &result.error);
  if (result.ok) {
    EXPECT_EQ(result.tokens.front(), -7) << "what was there before is kept";
    result.tokens.erase(result.tokens.begin());
  }
  return result;
}

TEST(TokenDecode, FormatComesFromTheFieldsLastExtension) {
  EXPECT_EQ(token_format_of_field("u16"), TokenFormat::kU16);
  EXPECT_EQ(token_format_of_field("tokens.u16"), TokenFormat::kU16);
  EXPECT_EQ(token_format_of_field("TOK.U16"), TokenFormat::kU16) << "compared lower-cased, as member extensions";
  EXPECT_EQ(token_format_of_field("u32"), TokenFormat::kU32);
  EXPECT_EQ(token_format_of_field("input_ids.npy"), TokenFormat::kNpy);
  EXPECT_EQ(token_format_of_field("txt"), TokenFormat::kTxt);
  try {
    token_format_of_field("tokens.bin");
    FAIL();
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kConfig);
    EXPECT_NE(std::string(error.what()).find("data.field 'tokens.bin'"), std::string::npos)
        << error.what();
  }
}

TEST(TokenDecode, RawLittleEndianIds) {
  const Decoded u16 =
      decode(TokenFormat::kU16, bytes_of(std::string("\x01\x00\xff\x00\x34\x12", 6)));
  ASSERT_TRUE(u16.ok) << u16.error;
  EXPECT_EQ(u16.tokens, (std::vector<int32_t>{1, 255, 0x1234}));
  const Decoded u32 =
      decode(TokenFormat::kU32, bytes_of(std::string("\x02\x00\x00\x00\x50\xc3\x00\x00", 8)));
  ASSERT_TRUE(u32.ok) << u32.error;
  EXPECT_EQ(u32.tokens, (std::vector<int32_t>{2, 50000}));
  EXPECT_TRUE(decode(TokenFormat::kU16, {}).ok);
}

TEST(TokenDecode, TextBytesAreTokens) {
  const Decoded text = decode(TokenFormat::kTxt, bytes_of("hé\n"));
  ASSERT_TRUE(text.ok);
  EXPECT_EQ(text.tokens, (std::vector<int32_t>{'h', 0xc3, 0xa9, '\n'}));
  const Decoded small_vocab = decode(TokenFormat::kTxt, bytes_of("ab"), 98);
  EXPECT_FALSE(small_vocab.ok);
  EXPECT_EQ(small_vocab.error, "token 98 >= vocab 98 at index 1");
}

TEST(TokenDecode, PartialTokenIsAnError) {
  const Decoded odd = decode(TokenFormat::kU16, bytes_of("abc"));
  EXPECT_FALSE(odd.ok);
  EXPECT_EQ(odd.error, "payload of 3 bytes is not a whole number of 2-byte tokens");
  EXPECT_EQ(decode(TokenFormat::kU32, bytes_of("abcdef")).error,
            "payload of 6 bytes is not a whole number of 4-byte tokens");
}

TEST(TokenDecode, IdOutsideTheVocabularyNamesValueAndIndex) {
  const Decoded big =
      decode(TokenFormat::kU32, bytes_of(std::string("\x01\0\0\0\x70\x11\x01\0", 8)));
  EXPECT_FALSE(big.ok);
  EXPECT_EQ(big.error, "token 70000 >= vocab 50257 at index 1");
  EXPECT_EQ(big.tokens, (std::vector<int32_t>{-7})) << "nothing is appended on failure";
  const Decoded negative =
      decode(TokenFormat::kNpy, npy("<i4", "(2,)", std::string("\x05\0\0\0\xfb\xff\xff\xff", 8)));
  EXPECT_FALSE(negative.ok);
  EXPECT_EQ(negative.error, "token -5 < 0 at index 1");
  const Decoded huge =
      decode(TokenFormat::kU32, bytes_of(std::string("\xff\xff\xff\xff", 4)), int64_t{1} << 40);
  EXPECT_FALSE(huge.ok);
  EXPECT_NE(huge.error.find("does not fit"), std::string::npos) << huge.error;
}

TEST(TokenDecode, NpyDtypesByteOrdersAndVersions) {
  const std::vector<int32_t> expected = {1, 258, 50000};
  struct Case {
    std::string descr;
    std::string data;
  };
  const std::vector<Case> cases = {
      {"<u2", std::string("\x01\x00\x02\x01\x50\xc3", 6)},
      {">u2", std::string("\x00\x01\x01\x02\xc3\x50", 6)},
      {"|u2", std::string("\x01\x00\x02\x01\x50\xc3", 6)},
      {"<u4", std::string("\x01\0\0\0\x02\x01\0\0\x50\xc3\0\0", 12)},
      {">u4", std::string("\0\0\0\x01\0\0\x01\x02\0\0\xc3\x50", 12)},
      {"<i4", std::string("\x01\0\0\0\x02\x01\0\0\x50\xc3\0\0", 12)},
      {"<i8", std::string("\x01\0\0\0\0\0\0\0\x02\x01\0\0\0\0\0\0\x50\xc3\0\0\0\0\0\0", 24)},
      {">i8", std::string("\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\x01\x02\0\0\0\0\0\0\xc3\x50", 24)},
  };
  for (const Case& c : cases) {
    for (const int major : {1, 2, 3}) {
      const Decoded decoded = decode(TokenFormat::kNpy, npy(c.descr, "(3,)", c.data, major));
      ASSERT_TRUE(decoded.ok) << c.descr << " v" << major << ": " << decoded.error;
      EXPECT_EQ(decoded.tokens, expected) << c.descr << " v" << major;
    }
  }
  const Decoded empty = decode(TokenFormat::kNpy, npy("<u2", "(0,)", ""));
  ASSERT_TRUE(empty.ok) << empty.error;
  EXPECT_TRUE(empty.tokens.empty());
}

TEST(TokenDecode, NpyThatIsNotA1DTokenArrayIsRejected) {
  const std::string four = std::string(4, '\0');
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<f4", "(1,)", four)).error,
            "npy dtype '<f4' is not a token type (uint16, uint32, int32 or int64)");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(1, 2)", four)).error,
            "npy shape (1, 2) is not 1-D");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "()", "")).error, "npy shape () is not 1-D");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(2,)", four, 1, "True")).error,
            "npy fortran_order is True, not False");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(3,)", four)).error,
            "npy shape (3,) of <u2 does not match the 4 data bytes");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(1,)", four)).error,
            "npy shape (1,) of <u2 does not match the 4 data bytes");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(99999999999999999999,)", four)).error,
            "npy shape (99999999999999999999,) is not 1-D");
  EXPECT_EQ(decode(TokenFormat::kNpy, bytes_of("PK\3\4 not numpy")).error,
            "not an npy file (no \\x93NUMPY magic)");
  EXPECT_EQ(decode(TokenFormat::kNpy, npy("<u2", "(2,)", four, 4)).error,
            "npy version 4.0 is not supported (1.0, 2.0, 3.0)");
}

TEST(TokenDecode, EveryTruncationOfAnNpyFailsCleanly) {
  const std::vector<uint8_t> whole = npy("<u2", "(4,)", std::string(8, '\x01'));
  for (size_t size = 0; size < whole.size(); ++size) {
    // A copy of exactly `size` bytes, so AddressSanitizer sees any read past it.
    const std::vector<uint8_t> cut(whole.begin(),
                                   whole.begin() + static_cast<std::ptrdiff_t>(size));
    const Decoded decoded = decode(TokenFormat::kNpy, cut);
    EXPECT_FALSE(decoded.ok) << size;
    EXPECT_FALSE(decoded.error.empty()) << size;
    EXPECT_EQ(decoded.error.find('\n'), std::string::npos) << decoded.error;
  }
}

}  // namespace
}  // namespace trainbench
