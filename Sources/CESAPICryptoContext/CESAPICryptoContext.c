#define _GNU_SOURCE
#include "CESAPICryptoContext.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct ossl_lib_ctx_st OSSL_LIB_CTX;
typedef OSSL_LIB_CTX *(*ContextNew)(void);
typedef void (*ContextFree)(OSSL_LIB_CTX *);

#if defined(__x86_64__)
#define SLOT_RELOCATION(type) ((type) == R_X86_64_JUMP_SLOT || (type) == R_X86_64_GLOB_DAT)
#elif defined(__aarch64__)
#define SLOT_RELOCATION(type) ((type) == R_AARCH64_JUMP_SLOT || (type) == R_AARCH64_GLOB_DAT)
#endif

static ContextNew libcryptoNew;
static ContextFree libcryptoFree;
static OSSL_LIB_CTX *sharedContext;
static pthread_once_t sharedContextMade = PTHREAD_ONCE_INIT;
static _Atomic uint64_t requestsFromESAPI;
static _Atomic uint64_t contextsMade;

static void makeSharedContext(void) {
    sharedContext = libcryptoNew();
    if (sharedContext != NULL) atomic_fetch_add(&contextsMade, 1);
}

/* What libtss2-esys now calls instead of OSSL_LIB_CTX_new. */
static OSSL_LIB_CTX *sharedContextForESAPI(void) {
    atomic_fetch_add(&requestsFromESAPI, 1);
    pthread_once(&sharedContextMade, makeSharedContext);
    // Should libcrypto fail to make the one context, ESAPI gets a context of its own as before.
    return sharedContext != NULL ? sharedContext : libcryptoNew();
}

/* What libtss2-esys now calls instead of OSSL_LIB_CTX_free: the shared context is kept. */
static void releaseContextFromESAPI(OSSL_LIB_CTX *context) {
    if (context == NULL || context == sharedContext) return;
    libcryptoFree(context);
}

/* The import slots to point elsewhere, found in one loaded object. */
typedef struct {
    ElfW(Addr) newSlot;
    ElfW(Addr) freeSlot;
    ElfW(Addr) relroStart;
    ElfW(Addr) relroEnd;
} Slots;

/* glibc relocates the dynamic section's addresses in place on x86_64 and arm64; an offset smaller
 * than the load address has not been. */
static ElfW(Addr) absolute(ElfW(Addr) base, ElfW(Addr) pointer) {
    return pointer < base ? base + pointer : pointer;
}

static void findSlotsIn(const ElfW(Rela) *relocations, size_t size, ElfW(Addr) base,
                        const ElfW(Sym) *symbols, const char *names, Slots *slots) {
#ifdef SLOT_RELOCATION
    for (size_t index = 0; index < size / sizeof(ElfW(Rela)); index++) {
        const ElfW(Rela) *relocation = &relocations[index];
        if (!SLOT_RELOCATION(ELF64_R_TYPE(relocation->r_info))) continue;
        const char *name = names + symbols[ELF64_R_SYM(relocation->r_info)].st_name;
        if (strcmp(name, "OSSL_LIB_CTX_new") == 0) slots->newSlot = base + relocation->r_offset;
        else if (strcmp(name, "OSSL_LIB_CTX_free") == 0) slots->freeSlot = base + relocation->r_offset;
    }
#endif
}

static int findESAPISlots(struct dl_phdr_info *info, size_t infoSize, void *context) {
    (void)infoSize;
    const char *path = info->dlpi_name;
    if (path == NULL) return 0;
    const char *file = strrchr(path, '/');
    file = file == NULL ? path : file + 1;
    if (strncmp(file, "libtss2-esys.so", strlen("libtss2-esys.so")) != 0) return 0;

    Slots *slots = context;
    const ElfW(Dyn) *dynamic = NULL;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[index];
        if (header->p_type == PT_DYNAMIC) dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + header->p_vaddr);
        if (header->p_type == PT_GNU_RELRO) {
            slots->relroStart = info->dlpi_addr + header->p_vaddr;
            slots->relroEnd = slots->relroStart + header->p_memsz;
        }
    }
    if (dynamic == NULL) return 1;

    ElfW(Addr) base = info->dlpi_addr;
    const ElfW(Sym) *symbols = NULL;
    const char *names = NULL;
    const ElfW(Rela) *pltRelocations = NULL, *relocations = NULL;
    size_t pltSize = 0, size = 0;
    ElfW(Sxword) pltKind = DT_RELA;
    for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_STRTAB: names = (const char *)absolute(base, entry->d_un.d_ptr); break;
        case DT_JMPREL: pltRelocations = (const ElfW(Rela) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltSize = entry->d_un.d_val; break;
        case DT_PLTREL: pltKind = (ElfW(Sxword))entry->d_un.d_val; break;
        case DT_RELA: relocations = (const ElfW(Rela) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_RELASZ: size = entry->d_un.d_val; break;
        default: break;
        }
    }
    if (symbols == NULL || names == NULL) return 1;
    if (pltRelocations != NULL && pltKind == DT_RELA) findSlotsIn(pltRelocations, pltSize, base, symbols, names, slots);
    if (relocations != NULL) findSlotsIn(relocations, size, base, symbols, names, slots);
    return 1;
}

/* Writes `value` into `slot`, lifting RELRO's read-only protection for the moment of the write. */
static bool writeSlot(ElfW(Addr) slot, void *value, const Slots *slots) {
    bool readOnly = slot >= slots->relroStart && slot < slots->relroEnd;
    uintptr_t pageSize = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *page = (void *)(slot & ~(pageSize - 1));
    if (readOnly && mprotect(page, pageSize, PROT_READ | PROT_WRITE) != 0) return false;
    atomic_store((_Atomic(void *) *)slot, value);
    if (readOnly) mprotect(page, pageSize, PROT_READ);
    return true;
}

static bool installed;
static pthread_once_t installation = PTHREAD_ONCE_INIT;

static void install(void) {
    libcryptoNew = (ContextNew)dlsym(RTLD_DEFAULT, "OSSL_LIB_CTX_new");
    libcryptoFree = (ContextFree)dlsym(RTLD_DEFAULT, "OSSL_LIB_CTX_free");
    if (libcryptoNew == NULL || libcryptoFree == NULL) return;
    Slots slots = {0};
    dl_iterate_phdr(findESAPISlots, &slots);
    // Both or neither: a context from the shared one must never reach libcrypto's free.
    if (slots.newSlot == 0 || slots.freeSlot == 0) return;
    if (!writeSlot(slots.freeSlot, (void *)releaseContextFromESAPI, &slots)) return;
    installed = writeSlot(slots.newSlot, (void *)sharedContextForESAPI, &slots);
}

bool cesapi_crypto_context_install(void) {
    pthread_once(&installation, install);
    return installed;
}

CESAPICryptoContextCounts cesapi_crypto_context_counts(void) {
    CESAPICryptoContextCounts counts = {
        .requestsFromESAPI = atomic_load(&requestsFromESAPI),
        .contextsMade = atomic_load(&contextsMade),
    };
    return counts;
}
