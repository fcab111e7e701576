// A CUDA driver with one device whose memory is host memory: the driver API entry points
// the CUDA stager resolves, for testing on a host without a GPU that the stager needs
// nothing but the driver and makes a context current before every call. Built as
// libcuda.so.1 and found by the test through LD_LIBRARY_PATH; never installed.
#include <cstdlib>
#include <cstring>
#include <mutex>

extern "C" {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;

enum { kSuccess = 0, kInvalidValue = 1, kNotInitialized = 3, kInvalidContext = 201 };

static int initialized;
static char primary_context;           /* its address is the one context */
static thread_local CUcontext current; /* per thread, as the driver keeps it */
static char dummy_stream, dummy_event;
static size_t registered_bytes; /* read by the test through dlsym */
static std::mutex mu;

size_t gpufs_fake_registered_bytes(void) { return registered_bytes; }

static CUresult Ready(void) {
  if (!initialized) return kNotInitialized;
  return current == &primary_context ? kSuccess : kInvalidContext;
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  initialized = 1;
  return kSuccess;
}
CUresult cuGetErrorString(CUresult rc, const char** text) {
  *text = rc == kInvalidContext ? "invalid device context" : "fake driver error";
  return kSuccess;
}
CUresult cuDeviceGetCount(int* count) {
  *count = initialized ? 1 : 0;
  return initialized ? kSuccess : kNotInitialized;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? kSuccess : kInvalidValue;
}
CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  (void)device;
  std::strncpy(name, "gpufs fake device", static_cast<size_t>(length));
  return kSuccess;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  (void)device;
  *bytes = size_t{16} << 30;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  (void)device;
  *context = &primary_context;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  (void)device;
  return kSuccess;
}
CUresult cuCtxSetCurrent(CUcontext context) {
  current = context;
  return kSuccess;
}
CUresult cuMemHostRegister_v2(void* base, size_t bytes, unsigned flags) {
  (void)base;
  (void)flags;
  if (Ready() != kSuccess) return Ready();
  std::lock_guard lock(mu);
  registered_bytes += bytes;
  return kSuccess;
}
CUresult cuMemHostUnregister(void* base) {
  (void)base;
  return Ready();
}
CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  if (Ready() != kSuccess) return Ready();
  *pointer = reinterpret_cast<CUdeviceptr>(std::malloc(bytes));
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr pointer) {
  std::free(reinterpret_cast<void*>(pointer));
  return Ready();
}
CUresult cuMemAllocHost_v2(void** pointer, size_t bytes) {
  if (Ready() != kSuccess) return Ready();
  *pointer = std::malloc(bytes);
  return kSuccess;
}
CUresult cuMemFreeHost(void* pointer) {
  std::free(pointer);
  return Ready();
}
CUresult cuStreamCreate(CUstream* stream, unsigned flags) {
  (void)flags;
  *stream = &dummy_stream;
  return Ready();
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  (void)stream;
  return Ready();
}
CUresult cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return Ready();
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr device, const void* host, size_t bytes, CUstream s) {
  (void)s;
  if (Ready() != kSuccess) return Ready();
  std::memcpy(reinterpret_cast<void*>(device), host, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* host, CUdeviceptr device, size_t bytes) {
  if (Ready() != kSuccess) return Ready();
  std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
  return kSuccess;
}
CUresult cuEventCreate(CUevent* event, unsigned flags) {
  (void)flags;
  *event = &dummy_event;
  return Ready();
}
CUresult cuEventRecord(CUevent event, CUstream stream) {
  (void)event;
  (void)stream;
  return Ready();
}
CUresult cuEventSynchronize(CUevent event) {
  (void)event;
  return Ready();
}
CUresult cuEventDestroy_v2(CUevent event) {
  (void)event;
  return Ready();
}

}  // extern "C"
