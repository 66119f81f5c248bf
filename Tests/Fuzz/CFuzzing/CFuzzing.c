#include "CFuzzing.h"

#ifdef FUZZING
// In libclang_rt.fuzzer: a strong reference, so the linker takes the driver from the archive
// (and not its main, since the Swift harness has one).
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));

int tk_fuzz_run(int *argc, char ***argv, tk_fuzz_callback callback) {
    return LLVMFuzzerRunDriver(argc, argv, callback);
}
#else
int tk_fuzz_run(int *argc, char ***argv, tk_fuzz_callback callback) {
    (void)argc; (void)argv; (void)callback;
    return -1;
}
#endif
