/* moe_helpers.c - C helpers linked into every host shared object.

   Part of moe-compiler. The build compiles this file once (-O2 -fPIC) and
   embeds the object in the compiler, which links it into each bundle's
   shared object, so that the compiled code needs no MLIR runtime library:
   the heap buffers of the compiled code, `memrefCopy` (MLIR's strided
   copy, emitted for copies between non-contiguous views) and the thread
   count of the parallel loops. */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The compiled code's heap buffers (memref.alloc through MLIR's generic
   allocation functions). A training step allocates the same sizes every
   step, and glibc maps each large buffer fresh and unmaps it when it is
   freed: every step paid the kernel's page faults and zeroing again.
   Blocks of at least kKeep bytes are kept when freed, by exact size and
   alignment, and handed out again; the rest go back to malloc. A block is
   `align` bytes of which the last 16 hold its size and alignment, then the
   buffer. */
enum { kKeep = 1 << 20, kBins = 256 };
typedef struct Kept { struct Kept *next; } Kept;
static struct { size_t size, align; Kept *head; } bins[kBins];
static int binCount;
static pthread_mutex_t binLock = PTHREAD_MUTEX_INITIALIZER;

static Kept **binOf(size_t size, size_t align, int add) {
  for (int i = 0; i < binCount; ++i)
    if (bins[i].size == size && bins[i].align == align)
      return &bins[i].head;
  if (!add || binCount == kBins)
    return 0;
  bins[binCount].size = size;
  bins[binCount].align = align;
  bins[binCount].head = 0;
  return &bins[binCount++].head;
}

void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t size) {
  size_t align = 64;
  while (align < alignment)
    align *= 2;
  if (size >= kKeep) {
    pthread_mutex_lock(&binLock);
    Kept **bin = binOf(size, align, 0);
    Kept *block = bin ? *bin : 0;
    if (block)
      *bin = block->next;
    pthread_mutex_unlock(&binLock);
    if (block)
      return block;
  }
  void *region = 0;
  if (posix_memalign(&region, align, align + size) != 0)
    return 0;
  char *buffer = (char *)region + align;
  size_t header[2] = {size, align};
  memcpy(buffer - sizeof header, header, sizeof header);
  return buffer;
}

void *_mlir_memref_to_llvm_alloc(uint64_t size) {
  return _mlir_memref_to_llvm_aligned_alloc(16, size);
}

void _mlir_memref_to_llvm_free(void *pointer) {
  if (!pointer)
    return;
  size_t header[2];
  memcpy(header, (char *)pointer - sizeof header, sizeof header);
  if (header[0] >= kKeep) {
    pthread_mutex_lock(&binLock);
    Kept **bin = binOf(header[0], header[1], 1);
    if (bin) {
      Kept *block = (Kept *)pointer;
      block->next = *bin;
      *bin = block;
    }
    pthread_mutex_unlock(&binLock);
    if (bin)
      return;
  }
  free((char *)pointer - header[1]);
}

/* The kept blocks go back when the shared object is unloaded. */
__attribute__((destructor)) static void releaseKept(void) {
  for (int i = 0; i < binCount; ++i)
    for (Kept *block = bins[i].head; block;) {
      Kept *next = block->next;
      free((char *)block - bins[i].align);
      block = next;
    }
  binCount = 0;
}

typedef struct {
  int64_t rank;
  void *descriptor;
} UnrankedMemRef;

void memrefCopy(int64_t elemSize, UnrankedMemRef *src, UnrankedMemRef *dst) {
  int64_t rank = src->rank;
  /* {allocated, aligned, offset, sizes[rank], strides[rank]} */
  char **s = (char **)src->descriptor, **d = (char **)dst->descriptor;
  const int64_t *ss = (const int64_t *)(s + 2), *ds = (const int64_t *)(d + 2);
  const int64_t *sizes = ss + 1, *srcStrides = ss + 1 + rank,
                *dstStrides = ds + 1 + rank;
  char *from = s[1] + ss[0] * elemSize, *to = d[1] + ds[0] * elemSize;
  int64_t index[16] = {0};
  if (rank > 16)
    __builtin_trap();
  for (int64_t i = 0; i < rank; ++i)
    if (sizes[i] == 0)
      return;
  for (;;) {
    memcpy(to, from, (size_t)elemSize);
    int64_t dim = rank - 1;
    for (; dim >= 0; --dim) {
      from += srcStrides[dim] * elemSize;
      to += dstStrides[dim] * elemSize;
      if (++index[dim] < sizes[dim])
        break;
      from -= srcStrides[dim] * sizes[dim] * elemSize;
      to -= dstStrides[dim] * sizes[dim] * elemSize;
      index[dim] = 0;
    }
    if (dim < 0)
      return;
  }
}

/* The threads of the layer's parallel loops (OpenMP's), which the runtime
   sets before every call. */
extern void omp_set_num_threads(int);
void moe_set_threads(int32_t count) {
  if (count > 0)
    omp_set_num_threads(count);
}
