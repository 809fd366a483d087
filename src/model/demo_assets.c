/* The tokenizer files of the demo model, embedded in the binary so that an installed `deepinfer`
 * can generate the demo model without the source tree.
 *
 * How it works: the assembler's `.incbin` copies assets/tokenizer/tokenizer.json (6.4 MB) and
 * tokenizer_config.json into read-only data between a start and an end label; the accessors return
 * the pointer and the length. The labels are hidden symbols (not exported from a shared object);
 * only the accessors are the interface. The static library links this object only into programs that call
 * the demo model. CMakeLists.txt lists the two files as OBJECT_DEPENDS so a changed asset rebuilds
 * it. Object formats: ELF (Linux, the BSDs) and Mach-O (macOS). */
#include "model/demo_model.h"

#ifndef DI_SOURCE_DIR
#error "DI_SOURCE_DIR (the repository root) must be defined by the build"
#endif

#define DI_ASSET_DIR DI_SOURCE_DIR "/assets/tokenizer/"

/* Section, symbol prefix and "not exported from a shared object" directive per object format. */
#if defined(__APPLE__)
#define DI_RODATA_SECTION "__DATA,__const"
#define DI_SYM(name) "_" name
#define DI_HIDE(sym) ".private_extern " sym "\n"
#elif defined(__ELF__)
#define DI_RODATA_SECTION ".rodata"
#define DI_SYM(name) name
#define DI_HIDE(sym) ".hidden " sym "\n"
#else
#error "demo_assets.c: .incbin needs an ELF or Mach-O target"
#endif

#define DI_INCBIN(name, file)                                                  \
    __asm__(".pushsection " DI_RODATA_SECTION "\n"                             \
            ".balign 16\n"                                                     \
            ".globl " DI_SYM(name "_start") "\n" DI_HIDE(DI_SYM(name "_start")) \
            ".globl " DI_SYM(name "_end") "\n" DI_HIDE(DI_SYM(name "_end"))     \
            DI_SYM(name "_start") ":\n"                                        \
            ".incbin \"" DI_ASSET_DIR file "\"\n"                              \
            DI_SYM(name "_end") ":\n"                                          \
            ".byte 0\n"                                                        \
            ".popsection\n")

DI_INCBIN("di_demo_tok_json", "tokenizer.json");
DI_INCBIN("di_demo_tok_cfg", "tokenizer_config.json");

#define DI_HIDDEN __attribute__((visibility("hidden")))
extern DI_HIDDEN const unsigned char di_demo_tok_json_start[], di_demo_tok_json_end[];
extern DI_HIDDEN const unsigned char di_demo_tok_cfg_start[], di_demo_tok_cfg_end[];

const unsigned char *di_demo_asset_tokenizer_json(size_t *n_bytes) {
    *n_bytes = (size_t)(di_demo_tok_json_end - di_demo_tok_json_start);
    return di_demo_tok_json_start;
}

const unsigned char *di_demo_asset_tokenizer_config_json(size_t *n_bytes) {
    *n_bytes = (size_t)(di_demo_tok_cfg_end - di_demo_tok_cfg_start);
    return di_demo_tok_cfg_start;
}
