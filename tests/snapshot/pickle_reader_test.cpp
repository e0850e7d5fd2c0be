// The pickle reader on pickles Python wrote (protocols 2 to 5, memo, frames), and on every way a pickle
// can be bad: truncated at every byte, opcodes outside the subset, sizes past the end, deep nesting.
#include <gtest/gtest.h>

#include "engine/snapshot/pickle_reader.h"
#include "engine/snapshot/pickle_writer.h"
#include "tests/snapshot/pickle_test_support.h"

namespace ferry {
namespace {

using testing::from_hex;

// pickle.dumps({'a': [1, -2, 2.5, 'x', None, True, False, (1, 2)], 'big': 0x7f0000001200, 'neg': -(1 << 40)}, protocol=P)
const char* const kProtocol2 =
    "80027d71002858010000006171015d7102284b014afeffffff47400400000000000058010000007871034e88894b014b0286710465580300000062696771058a06"
    "00120000007f58030000006e656771068a060000000000ff752e";
// The same plus 'b': b'\x00\x01', protocol 4 (FRAME, MEMOIZE, SHORT_BINUNICODE, SHORT_BINBYTES).
const char* const kProtocol4 =
    "8004954f000000000000007d94288c0161945d94284b014afeffffff4740040000000000008c0178944e88894b014b028694658c03626967948a0600120000007f"
    "8c036e6567948a060000000000ff8c0162944302000194752e";
// pickle.dumps([s, s, [s]], protocol=4) with s = 'shared': the memo shares one string three times.
const char* const kMemo = "80049515000000000000005d94288c067368617265649468015d94680161652e";

void expect_example(const PickleDocument& document) {
  const PickleRef root = document.root();
  ASSERT_EQ(document.kind(root), PickleKind::dict);
  const PickleRef a = *document.find(root, "a");
  ASSERT_EQ(document.items(a).size(), 8u);
  const auto item = [&](std::size_t i) { return document.items(a)[i]; };
  EXPECT_EQ(document.as_int(item(0)), 1);
  EXPECT_EQ(document.as_int(item(1)), -2);
  EXPECT_EQ(document.as_float(item(2)), 2.5);
  EXPECT_EQ(document.as_text(item(3)), "x");
  EXPECT_EQ(document.kind(item(4)), PickleKind::none);
  EXPECT_TRUE(document.as_bool(item(5)));
  EXPECT_FALSE(document.as_bool(item(6)));
  EXPECT_EQ(document.kind(item(7)), PickleKind::tuple);
  EXPECT_EQ(document.as_int(document.items(item(7))[1]), 2);
  EXPECT_EQ(document.as_int(*document.find(root, "big")), 0x7f0000001200);
  EXPECT_EQ(document.as_int(*document.find(root, "neg")), -(std::int64_t{1} << 40));
}

TEST(PickleReader, ReadsWhatPythonWritesInProtocols2And4) {
  expect_example(read_pickle(from_hex(kProtocol2), "p2"));
  const PickleDocument p4 = read_pickle(from_hex(kProtocol4), "p4");
  expect_example(p4);
  const PickleRef bytes = *p4.find(p4.root(), "b");
  EXPECT_EQ(p4.kind(bytes), PickleKind::bytes);
  EXPECT_EQ(p4.as_text(bytes), std::string("\x00\x01", 2));
}

TEST(PickleReader, MemoSharesValues) {
  const PickleDocument document = read_pickle(from_hex(kMemo), "memo");
  const auto items = document.items(document.root());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], items[1]);
  EXPECT_EQ(document.items(items[2])[0], items[0]);
  EXPECT_EQ(document.as_text(items[0]), "shared");
}

TEST(PickleReader, WriterOutputReadsBack) {
  const PickleDocument original = read_pickle(from_hex(kProtocol4), "p4");
  const std::string written = write_pickle(original);
  expect_example(read_pickle(written, "written"));
  EXPECT_EQ(write_pickle(read_pickle(written, "again")), written);
}

TEST(PickleReader, EveryTruncationIsAnErrorWithItsOffset) {
  const std::string data = from_hex(kProtocol4);
  for (std::size_t length = 0; length < data.size(); ++length) {
    try {
      read_pickle(data.substr(0, length), "cut.pickle");
      ADD_FAILURE() << "a pickle cut at " << length << " bytes was accepted";
    } catch (const PickleError& error) {
      EXPECT_EQ(error.file(), "cut.pickle");
      EXPECT_LE(error.offset(), length);
      EXPECT_NE(std::string(error.what()).find("cut.pickle: offset"), std::string::npos) << error.what();
    }
  }
}

void expect_error(const std::string& data, const std::string& expected, int opcode) {
  try {
    read_pickle(data, "bad.pickle");
    ADD_FAILURE() << "accepted; expected: " << expected;
  } catch (const PickleError& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    EXPECT_EQ(error.opcode(), opcode) << error.what();
  }
}

TEST(PickleReader, RefusesOpcodesOutsideTheSubset) {
  // pickle.dumps(b'\x00\x01', protocol=2) builds bytes with GLOBAL _codecs.encode + REDUCE.
  expect_error(from_hex("8002635f636f646563730a656e636f64650a710058020000000001710158060000006c6174696e3171028671035271042e"),
               "offset 2: opcode GLOBAL (0x63): is not in the subset ferry reads", 'c');
  expect_error(std::string("\x80\x04\x93.", 4), "STACK_GLOBAL (0x93)", 0x93);
  expect_error(std::string("\x80\x04\xff.", 4), "offset 2: opcode 0xff: is not a pickle opcode", 0xff);
  expect_error(std::string("\x80\x06N.", 4), "protocol 6; ferry reads protocols 2 to 5", 0x80);
}

TEST(PickleReader, RefusesSizesPastTheEnd) {
  // BINUNICODE8 claiming 2^62 bytes, BINUNICODE claiming 4 GiB - 1, LONG4 of 2^31 bytes, a FRAME of 1 TiB.
  expect_error(std::string("\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x40", 11), "needs 4611686018427387904 bytes of argument but 0 remain", 0x8d);
  expect_error(std::string("\x80\x04X\xff\xff\xff\xff" "abc", 10), "needs 4294967295 bytes", 'X');
  expect_error(std::string("\x80\x04\x8b\x00\x00\x00\x80", 7), "does not fit in 64 bits", 0x8b);
  expect_error(std::string("\x80\x04\x95\x00\x00\x00\x00\x00\x01\x00\x00N.", 13), "runs past the end", 0x95);
  expect_error(std::string("\x80\x04\x8a\x09" "123456789.", 14), "an integer of 9 bytes does not fit in 64 bits", 0x8a);
}

TEST(PickleReader, RefusesDeepNestingWithoutRecursing) {
  // A million nested lists: ']' '(' repeated, never closed; and nested one-element lists closed with APPEND.
  std::string open = "\x80\x04";
  for (int i = 0; i < 1'000'000; ++i) open += "](";
  expect_error(open, "nested 65 deep; the limit is 64", '(');
  std::string closed = "\x80\x04";
  for (int i = 0; i < 100; ++i) closed += "]";
  closed += "N";
  for (int i = 0; i < 100; ++i) closed += "a";
  expect_error(closed + ".", "nested 65 deep", 'a');
}

TEST(PickleReader, RefusesBrokenStructure) {
  expect_error(std::string("\x80\x04h\x05.", 5), "memo entry 5 was never stored", 'h');
  expect_error(std::string("\x80\x04" "a.", 4), "needs a value but the stack is empty", 'a');
  expect_error(std::string("\x80\x04" "e.", 4), "needs a MARK but none is open", 'e');
  expect_error(std::string("\x80\x04)N" "a.", 6), "APPEND (0x61) needs a list below its items, found a tuple", 'a');
  expect_error(std::string("\x80\x04}]K\x01s.", 8), "a list cannot be a dict key", 's');
  expect_error(std::string("\x80\x04\x8c\x02\xc3\x28.", 7), "not valid UTF-8", 0x8c);
  expect_error(std::string("\x80\x04.", 3), "STOP with nothing on the stack", '.');
  expect_error(std::string("\x80\x04N", 3), "the data ends before the STOP opcode", -1);
}

TEST(PickleReader, ReadsTheCheckedInSnapshots) {
  const PickleDocument document = read_pickle_file(testing::snapshot_data_directory() + "/training.pickle");
  EXPECT_TRUE(document.find(document.root(), "segments").has_value());
  EXPECT_THROW(read_pickle_file(testing::snapshot_data_directory() + "/no-such.pickle"), PickleError);
}

}  // namespace
}  // namespace ferry
