/* A minimal NVTX tool for the annotation stress tests (tests/test_fuzz_annotation.py): loaded
 * through NVTX_INJECTION64_PATH, as Nsight Systems loads its own, so that pyprof runs with a live
 * "pyprof" domain on a machine without a GPU or nsys. It counts pushes and pops per thread; the
 * test reads the counts through ctypes. Self-contained: the few NVTX ABI values it needs are the
 * documented ones of nvtxDetail/nvtxTypes.h (NVTX v3), so no CUDA headers are required.
 */
#include <stddef.h>

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;
typedef const void *(*NvtxGetExportTableFunc)(unsigned int export_table_id);

enum { ETID_CALLBACKS = 1, CB_MODULE_CORE2 = 5, CBID_PUSH_EX = 4, CBID_POP = 5, CBID_DOMAIN_CREATE_A = 12 };

static __thread long depth;      /* ranges open on this thread */
static __thread long underflows; /* pops on this thread with no range open */
static long pushes_total, pops_total;
static char domain_token;

static int push_ex(void *domain, const void *attributes) {
    (void)domain; (void)attributes;
    __atomic_add_fetch(&pushes_total, 1, __ATOMIC_RELAXED);
    return (int)++depth;
}

static int pop(void *domain) {
    (void)domain;
    __atomic_add_fetch(&pops_total, 1, __ATOMIC_RELAXED);
    if (depth == 0) { underflows++; return -1; }
    return (int)--depth;
}

static void *domain_create_a(const char *name) { (void)name; return &domain_token; }

long tool_depth(void) { return depth; }
long tool_underflows(void) { return underflows; }
long tool_pushes(void) { return __atomic_load_n(&pushes_total, __ATOMIC_RELAXED); }
long tool_pops(void) { return __atomic_load_n(&pops_total, __ATOMIC_RELAXED); }

int InitializeInjectionNvtx2(NvtxGetExportTableFunc get_export_table) {
    const NvtxExportTableCallbacks *cb = get_export_table(ETID_CALLBACKS);
    NvtxFunctionTable table = 0;
    unsigned int size = 0;
    if (!cb || !cb->GetModuleFunctionTable(CB_MODULE_CORE2, &table, &size) || size <= CBID_DOMAIN_CREATE_A)
        return 0;
    *table[CBID_PUSH_EX] = (NvtxFunctionPointer)push_ex;
    *table[CBID_POP] = (NvtxFunctionPointer)pop;
    *table[CBID_DOMAIN_CREATE_A] = (NvtxFunctionPointer)domain_create_a;
    return 1;
}
