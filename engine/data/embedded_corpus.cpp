#include "engine/data/embedded_corpus.h"

// The assembler copies the file into read-only data between two symbols (FERRY_CORPUS_PATH comes from CMake).
__asm__(
    ".pushsection .rodata\n"
    ".balign 16\n"
    "ferry_embedded_corpus_begin:\n"
    ".incbin \"" FERRY_CORPUS_PATH "\"\n"
    "ferry_embedded_corpus_end:\n"
    ".popsection\n");

extern "C" const char ferry_embedded_corpus_begin[];
extern "C" const char ferry_embedded_corpus_end[];

namespace ferry {

std::string_view embedded_corpus_text() {
  return {ferry_embedded_corpus_begin, static_cast<std::size_t>(ferry_embedded_corpus_end - ferry_embedded_corpus_begin)};
}

}  // namespace ferry
