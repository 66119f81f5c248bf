// libFuzzer's driver, reached from Swift. Built with -DFUZZING (Scripts/fuzz.sh) it is linked in
// from the fuzzer runtime; built without, there is no fuzzer and tk_fuzz_run says so.
#ifndef TPMKEYCHAIN_CFUZZING_H
#define TPMKEYCHAIN_CFUZZING_H

#include <stddef.h>
#include <stdint.h>

typedef int (*tk_fuzz_callback)(const uint8_t *data, size_t size);

/// Runs libFuzzer with `callback` as LLVMFuzzerTestOneInput; -1 when this build has no fuzzer.
int tk_fuzz_run(int *argc, char ***argv, tk_fuzz_callback callback);

#endif
