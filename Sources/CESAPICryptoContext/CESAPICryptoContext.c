#define _GNU_SOURCE
#include "CESAPICryptoContext.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct ossl_lib_ctx_st OSSL_LIB_CTX;
typedef OSSL_LIB_CTX *(*ContextNew)(void);
typedef void (*ContextFree)(OSSL_LIB_CTX *);

#if defined(__x86_64__)
#define SUPPORTED_ARCHITECTURE true
#define SLOT_RELOCATION(type) ((type) == R_X86_64_JUMP_SLOT || (type) == R_X86_64_GLOB_DAT)
#elif defined(__aarch64__)
#define SUPPORTED_ARCHITECTURE true
#define SLOT_RELOCATION(type) ((type) == R_AARCH64_JUMP_SLOT || (type) == R_AARCH64_GLOB_DAT)
#else
#define SUPPORTED_ARCHITECTURE false
#define SLOT_RELOCATION(type) ((void)(type), false)
#endif

/* tpm2-tss 3.x and 4.x, whose OpenSSL backend makes and frees a context around each use. */
#define ESAPI_SONAME "libtss2-esys.so.0"
/* A libtss2-esys with more slots than this for one function is not one we have looked at. */
#define MAX_SLOTS 8

/* Esys_SetCryptoCallbacks, in a tpm2-tss 4.x libtss2-esys. */
typedef uint32_t (*SetCryptoCallbacks)(void *esysContext, const void *callbacks);
static _Atomic(SetCryptoCallbacks) setCryptoCallbacks;

static ContextNew libcryptoNew;
static ContextFree libcryptoFree;
static _Atomic(OSSL_LIB_CTX *) sharedContext;
static pthread_once_t sharedContextMade = PTHREAD_ONCE_INIT;
static _Atomic uint64_t requestsFromESAPI;
static _Atomic uint64_t contextsMade;

static void makeSharedContext(void) {
    OSSL_LIB_CTX *context = libcryptoNew();
    atomic_store(&sharedContext, context);
    if (context != NULL) atomic_fetch_add(&contextsMade, 1);
}

/* What libtss2-esys now calls instead of OSSL_LIB_CTX_new. */
static OSSL_LIB_CTX *sharedContextForESAPI(void) {
    atomic_fetch_add(&requestsFromESAPI, 1);
    pthread_once(&sharedContextMade, makeSharedContext);
    OSSL_LIB_CTX *context = atomic_load(&sharedContext);
    // Should libcrypto fail to make the one context, ESAPI gets a context of its own as before.
    return context != NULL ? context : libcryptoNew();
}

/* What libtss2-esys now calls instead of OSSL_LIB_CTX_free: the shared context is kept. */
static void releaseContextFromESAPI(OSSL_LIB_CTX *context) {
    if (context == NULL || context == atomic_load(&sharedContext)) return;
    libcryptoFree(context);
}

/* The loaded libtss2-esys, as dl_iterate_phdr describes it; valid while it stays loaded. */
typedef struct {
    const char *path;
    ElfW(Addr) base;
    const ElfW(Phdr) *headers;
    ElfW(Half) headerCount;
} Library;

static int findESAPI(struct dl_phdr_info *info, size_t infoSize, void *context) {
    (void)infoSize;
    const char *path = info->dlpi_name;
    if (path == NULL) return 0;
    const char *file = strrchr(path, '/');
    file = file == NULL ? path : file + 1;
    if (strncmp(file, "libtss2-esys.so", strlen("libtss2-esys.so")) != 0) return 0;
    *(Library *)context = (Library){path, info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum};
    return 1;
}

static bool inLibrary(const Library *library, ElfW(Addr) address) {
    for (ElfW(Half) index = 0; index < library->headerCount; index++) {
        const ElfW(Phdr) *header = &library->headers[index];
        ElfW(Addr) start = library->base + header->p_vaddr;
        if (header->p_type == PT_LOAD && address >= start && address < start + header->p_memsz) return true;
    }
    return false;
}

/* glibc relocates the dynamic section's addresses in place on x86_64 and arm64; an offset smaller
 * than the load address has not been. */
static ElfW(Addr) absolute(ElfW(Addr) base, ElfW(Addr) pointer) {
    return pointer < base ? base + pointer : pointer;
}

static char libraryDescription[160];

/* For the log: which tpm2-tss this is, down to the build, so a report names the exact binary. */
static void describe(const Library *library, const char *soname, int major) {
    char buildID[41] = "unknown";
    for (ElfW(Half) index = 0; index < library->headerCount; index++) {
        const ElfW(Phdr) *header = &library->headers[index];
        if (header->p_type != PT_NOTE) continue;
        size_t align = header->p_align == 8 ? 8 : 4;
        const unsigned char *note = (const unsigned char *)(library->base + header->p_vaddr);
        const unsigned char *end = note + header->p_memsz;
        while (note + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *entry = (const ElfW(Nhdr) *)note;
            const unsigned char *name = note + sizeof(ElfW(Nhdr));
            const unsigned char *bytes = name + ((entry->n_namesz + align - 1) & ~(align - 1));
            if (bytes + entry->n_descsz > end) break;
            if (entry->n_type == NT_GNU_BUILD_ID && entry->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                for (size_t byte = 0; byte < entry->n_descsz && byte < 20; byte++)
                    snprintf(buildID + 2 * byte, 3, "%02x", bytes[byte]);
            }
            note = bytes + ((entry->n_descsz + align - 1) & ~(align - 1));
        }
    }
    if (major > 0)
        snprintf(libraryDescription, sizeof libraryDescription, "%s (tpm2-tss %d.x%s, build ID %s)", soname, major,
                 major >= 4 ? ", has Esys_SetCryptoCallbacks" : "", buildID);
    else
        snprintf(libraryDescription, sizeof libraryDescription, "%s (build ID %s)", soname, buildID);
}

typedef struct {
    const ElfW(Sym) *symbols;
    const char *names;
    const char *soname;
    const ElfW(Rela) *tables[2];
    size_t sizes[2];
    bool otherFormat;
} Dynamic;

static bool readDynamic(const Library *library, Dynamic *dynamic) {
    const ElfW(Dyn) *entry = NULL;
    for (ElfW(Half) index = 0; index < library->headerCount; index++)
        if (library->headers[index].p_type == PT_DYNAMIC)
            entry = (const ElfW(Dyn) *)(library->base + library->headers[index].p_vaddr);
    if (entry == NULL) return false;
    ElfW(Addr) base = library->base;
    ElfW(Xword) soname = 0;
    bool hasSoname = false;
    for (; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_SYMTAB: dynamic->symbols = (const ElfW(Sym) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_STRTAB: dynamic->names = (const char *)absolute(base, entry->d_un.d_ptr); break;
        case DT_SONAME: soname = entry->d_un.d_val; hasSoname = true; break;
        case DT_JMPREL: dynamic->tables[0] = (const ElfW(Rela) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_PLTRELSZ: dynamic->sizes[0] = entry->d_un.d_val; break;
        case DT_PLTREL: dynamic->otherFormat |= entry->d_un.d_val != DT_RELA; break;
        case DT_RELA: dynamic->tables[1] = (const ElfW(Rela) *)absolute(base, entry->d_un.d_ptr); break;
        case DT_RELASZ: dynamic->sizes[1] = entry->d_un.d_val; break;
        // Slots we would not read are slots we could not patch.
        case DT_REL: dynamic->otherFormat = true; break;
        default: break;
        }
    }
    if (dynamic->symbols == NULL || dynamic->names == NULL) return false;
    dynamic->soname = hasSoname ? dynamic->names + soname : "";
    return true;
}

typedef struct {
    ElfW(Addr) addresses[MAX_SLOTS];
    size_t count;
} SlotList;

/* Every slot of the two functions, or false for a use of them that a slot write would not reach:
 * a pointer in data, a definition of their own, more slots than we expect. */
static bool collectSlots(const Library *library, const Dynamic *dynamic, SlotList *newSlots, SlotList *freeSlots) {
    for (int table = 0; table < 2; table++) {
        const ElfW(Rela) *relocations = dynamic->tables[table];
        if (relocations == NULL) continue;
        for (size_t index = 0; index < dynamic->sizes[table] / sizeof(ElfW(Rela)); index++) {
            const ElfW(Rela) *relocation = &relocations[index];
            if (ELF64_R_SYM(relocation->r_info) == 0) continue;
            const ElfW(Sym) *symbol = &dynamic->symbols[ELF64_R_SYM(relocation->r_info)];
            const char *name = dynamic->names + symbol->st_name;
            SlotList *list = strcmp(name, "OSSL_LIB_CTX_new") == 0    ? newSlots
                             : strcmp(name, "OSSL_LIB_CTX_free") == 0 ? freeSlots
                                                                      : NULL;
            if (list == NULL) continue;
            ElfW(Addr) address = library->base + relocation->r_offset;
            if (!SLOT_RELOCATION(ELF64_R_TYPE(relocation->r_info)) || symbol->st_shndx != SHN_UNDEF ||
                address % sizeof(void *) != 0 || !inLibrary(library, address))
                return false;
            // Some linkers let DT_RELASZ take in the PLT relocations too.
            bool known = false;
            for (size_t slot = 0; slot < list->count; slot++) known |= list->addresses[slot] == address;
            if (known) continue;
            if (list->count == MAX_SLOTS) return false;
            list->addresses[list->count++] = address;
        }
    }
    return true;
}

/* A slot still pointing into libtss2-esys (its PLT) is bound lazily, on first call; any other
 * value is what it was bound to, and must be the function we would call in its place. */
static bool slotsLeadTo(const SlotList *list, const Library *library, void *function) {
    for (size_t index = 0; index < list->count; index++) {
        void *value = atomic_load((_Atomic(void *) *)list->addresses[index]);
        if (value != function && !inLibrary(library, (ElfW(Addr))value)) return false;
    }
    return true;
}

/* The protection of each page as the kernel has it, from one reading of /proc/self/maps: -1 for
 * a page no mapping holds, or when the file is unreadable. One reading, because the kernel writes
 * out every mapping each time and a lookup CLI has about a hundred. */
static void protectionsFromMaps(const uintptr_t *pages, int *protections, size_t count) {
    for (size_t index = 0; index < count; index++) protections[index] = -1;
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) return;
    size_t found = 0;
    char *line = NULL;
    size_t capacity = 0;
    while (found < count && getline(&line, &capacity, maps) > 0) {
        // "start-end rwxp ...": two hex numbers and the flags, parsed without scanf.
        char *cursor = line;
        unsigned long start = strtoul(cursor, &cursor, 16);
        if (*cursor != '-') continue;
        unsigned long end = strtoul(cursor + 1, &cursor, 16);
        if (*cursor != ' ' || strlen(cursor + 1) < 3) continue;
        const char *flags = cursor + 1;
        int protection = (flags[0] == 'r' ? PROT_READ : 0) | (flags[1] == 'w' ? PROT_WRITE : 0) |
                         (flags[2] == 'x' ? PROT_EXEC : 0);
        for (size_t index = 0; index < count; index++) {
            if (protections[index] >= 0 || pages[index] < start || pages[index] >= end) continue;
            protections[index] = protection;
            found++;
        }
    }
    free(line);
    fclose(maps);
}

/* Without /proc: what glibc's _dl_protect_relro made read-only, both ends rounded down to the
 * runtime page size, so the last partial page stays writable. */
static int protectionFromRELRO(const Library *library, uintptr_t page, uintptr_t pageSize) {
    for (ElfW(Half) index = 0; index < library->headerCount; index++) {
        const ElfW(Phdr) *header = &library->headers[index];
        if (header->p_type != PT_GNU_RELRO) continue;
        uintptr_t start = (library->base + header->p_vaddr) & ~(pageSize - 1);
        uintptr_t end = (library->base + header->p_vaddr + header->p_memsz) & ~(pageSize - 1);
        if (page >= start && page < end) return PROT_READ;
    }
    return PROT_READ | PROT_WRITE;
}

typedef struct {
    _Atomic(void *) *address;
    void *original;
    void *replacement;
    uintptr_t page;
    int protection;
    bool isNew;
} Slot;

/* Each read-only page once, at its first slot. */
static bool liftsPage(const Slot *slots, size_t index) {
    if (slots[index].protection & PROT_WRITE) return false;
    for (size_t earlier = 0; earlier < index; earlier++)
        if (slots[earlier].page == slots[index].page) return false;
    return true;
}

static bool restoreProtection(const Slot *slots, size_t count, uintptr_t pageSize) {
    bool restored = true;
    for (size_t index = 0; index < count; index++)
        if (liftsPage(slots, index)) restored &= mprotect((void *)slots[index].page, pageSize, slots[index].protection) == 0;
    return restored;
}

/* Writes every slot, free slots first, so that a shared context can never reach libcrypto's free. */
static CESAPICryptoContextStatus writeSlots(Slot *slots, size_t count, uintptr_t pageSize) {
    for (size_t index = 0; index < count; index++) {
        if (!liftsPage(slots, index)) continue;
        if (mprotect((void *)slots[index].page, pageSize, slots[index].protection | PROT_WRITE) != 0) {
            restoreProtection(slots, index, pageSize);
            return CESAPICryptoContextProtectionFailed;
        }
    }
    for (size_t index = 0; index < count; index++) atomic_store(slots[index].address, slots[index].replacement);
    if (restoreProtection(slots, count, pageSize)) return CESAPICryptoContextInstalled;
    // RELRO could not be put back. Take back the new slots, so ESAPI no longer gets the shared context,
    // while the free slots keep releaseContextFromESAPI: it is libcrypto's free for every other
    // context, and a shared context handed out meanwhile must still never reach libcrypto's.
    for (size_t index = count; index-- > 0;)
        if (slots[index].isNew) atomic_store(slots[index].address, slots[index].original);
    restoreProtection(slots, count, pageSize);
    return CESAPICryptoContextProtectionFailed;
}

static _Atomic CESAPICryptoContextStatus outcome = CESAPICryptoContextNotAttempted;
static pthread_once_t installation = PTHREAD_ONCE_INIT;

static CESAPICryptoContextStatus patchESAPI(void) {
    // Turning the patch off is always safe, so the switch is honoured in setuid programs too.
    const char *setting = getenv("TPM_KEYCHAIN_ESYS_SHARED_CONTEXT");
    if (setting != NULL && strcmp(setting, "0") == 0) return CESAPICryptoContextDisabledByEnvironment;
    if (!SUPPORTED_ARCHITECTURE) return CESAPICryptoContextUnsupportedArchitecture;
    Library library = {0};
    dl_iterate_phdr(findESAPI, &library);
    if (library.path == NULL) return CESAPICryptoContextLibraryNotFound;
    Dynamic dynamic = {0};
    if (!readDynamic(&library, &dynamic)) return CESAPICryptoContextSlotCheckFailed;
    void *handle = dlopen(library.path, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) return CESAPICryptoContextLibraryNotFound;
    // The SONAME cannot tell 3.x from 4.x; the 4.0 API can. A later major that kept SONAME 0
    // would pass as 4.x; the slot checks below still hold for it.
    SetCryptoCallbacks setter = (SetCryptoCallbacks)dlsym(handle, "Esys_SetCryptoCallbacks");
    int major = setter != NULL ? 4 : 3;
    bool supported = strcmp(dynamic.soname, ESAPI_SONAME) == 0;
    describe(&library, dynamic.soname, supported ? major : 0);
    if (supported && setter != NULL) {
        // 4.x: the supported interface, set on each ESAPI context as it is made; no patch. (The
        // library stays loaded, being linked, so the address outlives the dlclose below.)
        dlclose(handle);
        if (cesapi_crypto_callbacks() == NULL) return CESAPICryptoContextSymbolsMissing;
        atomic_store(&setCryptoCallbacks, setter);
        return CESAPICryptoContextCallbacks;
    }
    // The global scope and libtss2-esys's own dependencies must agree on one libcrypto: with two
    // copies in the process, a context from one must not reach the other.
    libcryptoNew = (ContextNew)dlsym(RTLD_DEFAULT, "OSSL_LIB_CTX_new");
    libcryptoFree = (ContextFree)dlsym(RTLD_DEFAULT, "OSSL_LIB_CTX_free");
    bool sameLibcrypto = (void *)libcryptoNew == dlsym(handle, "OSSL_LIB_CTX_new") &&
                         (void *)libcryptoFree == dlsym(handle, "OSSL_LIB_CTX_free");
    dlclose(handle);
    if (!supported) return CESAPICryptoContextUnsupportedVersion;
    if (libcryptoNew == NULL || libcryptoFree == NULL) return CESAPICryptoContextSymbolsMissing;
    if (!sameLibcrypto) return CESAPICryptoContextSlotCheckFailed;

    SlotList newSlots = {0}, freeSlots = {0};
    if (dynamic.otherFormat || !collectSlots(&library, &dynamic, &newSlots, &freeSlots))
        return CESAPICryptoContextSlotCheckFailed;
    // Both or neither: a context from the shared one must never reach libcrypto's free.
    if (newSlots.count == 0 || freeSlots.count == 0) return CESAPICryptoContextSymbolsMissing;
    // This also refuses slots someone else already repointed, another copy of this code included.
    if (!slotsLeadTo(&newSlots, &library, (void *)libcryptoNew) || !slotsLeadTo(&freeSlots, &library, (void *)libcryptoFree))
        return CESAPICryptoContextSlotCheckFailed;

    uintptr_t pageSize = (uintptr_t)sysconf(_SC_PAGESIZE);
    Slot slots[2 * MAX_SLOTS];
    size_t count = 0;
    for (int kind = 0; kind < 2; kind++) {
        const SlotList *list = kind == 0 ? &freeSlots : &newSlots;
        void *replacement = kind == 0 ? (void *)releaseContextFromESAPI : (void *)sharedContextForESAPI;
        for (size_t index = 0; index < list->count; index++) {
            uintptr_t page = list->addresses[index] & ~(pageSize - 1);
            _Atomic(void *) *address = (_Atomic(void *) *)list->addresses[index];
            slots[count++] = (Slot){address, atomic_load(address), replacement, page, -1, kind == 1};
        }
    }
    uintptr_t pages[2 * MAX_SLOTS];
    int protections[2 * MAX_SLOTS];
    for (size_t index = 0; index < count; index++) pages[index] = slots[index].page;
    protectionsFromMaps(pages, protections, count);
    for (size_t index = 0; index < count; index++)
        slots[index].protection =
            protections[index] >= 0 ? protections[index] : protectionFromRELRO(&library, slots[index].page, pageSize);
    // Under lazy binding, a first call into ESAPI on another thread could still have the dynamic
    // linker bind a slot over ours; Engine installs before it uses ESAPI.
    return writeSlots(slots, count, pageSize);
}

static void install(void) {
    atomic_store(&outcome, patchESAPI());
}

bool cesapi_crypto_context_install(void) {
    pthread_once(&installation, install);
    CESAPICryptoContextStatus status = atomic_load(&outcome);
    return status == CESAPICryptoContextInstalled || status == CESAPICryptoContextCallbacks;
}

uint32_t cesapi_crypto_callbacks_set(void *esysContext) {
    SetCryptoCallbacks setter = atomic_load(&setCryptoCallbacks);
    if (setter == NULL || esysContext == NULL) return 0;
    uint32_t rc = setter(esysContext, cesapi_crypto_callbacks());
    // A refused table may be half installed (tpm2-tss copies members until the first it
    // rejects): NULL puts every built-in one back.
    if (rc != 0) setter(esysContext, NULL);
    return rc;
}

CESAPICryptoContextStatus cesapi_crypto_context_status(void) {
    return atomic_load(&outcome);
}

const char *cesapi_crypto_context_status_description(CESAPICryptoContextStatus status) {
    switch (status) {
    case CESAPICryptoContextNotAttempted: return "not installed yet";
    case CESAPICryptoContextInstalled: return "ESAPI shares one OpenSSL library context";
    case CESAPICryptoContextCallbacks: return "ESAPI's crypto callbacks use one OpenSSL library context (tpm2-tss 4.x)";
    case CESAPICryptoContextDisabledByEnvironment: return "disabled by TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0";
    case CESAPICryptoContextLibraryNotFound: return "libtss2-esys is not loaded as a shared library";
    case CESAPICryptoContextSymbolsMissing: return "libtss2-esys or libcrypto lacks OSSL_LIB_CTX_new/free";
    case CESAPICryptoContextUnsupportedArchitecture: return "not supported on this architecture (x86_64 and arm64 only)";
    case CESAPICryptoContextUnsupportedVersion: return "this libtss2-esys version was not checked";
    case CESAPICryptoContextSlotCheckFailed: return "libtss2-esys's import slots are not as expected";
    case CESAPICryptoContextProtectionFailed: return "could not change or restore the import slots' page protection";
    }
    return "unknown status";
}

const char *cesapi_crypto_context_library(void) {
    // Written inside the installation, before the status that publishes it.
    return atomic_load(&outcome) == CESAPICryptoContextNotAttempted ? "" : libraryDescription;
}

/* ESAPICryptoCallbacks.c's counts: hashes and HMACs started, contexts made. */
void cesapiCallbackCounts(uint64_t *started, uint64_t *made);

CESAPICryptoContextCounts cesapi_crypto_context_counts(void) {
    // The counts of the way in use: the callbacks' (4.x), else the patch's.
    if (atomic_load(&outcome) == CESAPICryptoContextCallbacks) {
        uint64_t started = 0, made = 0;
        cesapiCallbackCounts(&started, &made);
        return (CESAPICryptoContextCounts){.requestsFromESAPI = started, .contextsMade = made};
    }
    return (CESAPICryptoContextCounts){
        .requestsFromESAPI = atomic_load(&requestsFromESAPI),
        .contextsMade = atomic_load(&contextsMade),
    };
}
