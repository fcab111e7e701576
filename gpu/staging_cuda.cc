// The CUDA stager. The driver (libcuda.so.1, which every host with an NVIDIA driver has)
// and cuFile (libcufile) are opened with dlopen when first needed, never linked: the same
// binary runs on a host with no driver, no device or no GDS, and says which is missing.
// The driver API, not the runtime's: a host with a GPU need not have libcudart (KvikIO
// does the same). Memory comes from the device's primary context, the one the runtime
// (and so torch) uses, so pointers pass between them. Only the toolkit's headers are used.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "gpu/no_device.h"

namespace gpufs::gpu {
namespace {

// The driver entry points gpufs uses, resolved by their exported (versioned) names.
struct Driver {
  decltype(&cuInit) Init = nullptr;
  decltype(&cuGetErrorString) GetErrorString = nullptr;
  decltype(&cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&cuDeviceGet) DeviceGet = nullptr;
  decltype(&cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&cuDeviceTotalMem_v2) DeviceTotalMem = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease_v2) PrimaryCtxRelease = nullptr;
  decltype(&cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&cuMemHostRegister_v2) MemHostRegister = nullptr;
  decltype(&cuMemHostUnregister) MemHostUnregister = nullptr;
  decltype(&cuMemAlloc_v2) MemAlloc = nullptr;
  decltype(&cuMemFree_v2) MemFree = nullptr;
  decltype(&cuMemAllocHost_v2) MemAllocHost = nullptr;
  decltype(&cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&cuStreamCreate) StreamCreate = nullptr;
  decltype(&cuStreamDestroy_v2) StreamDestroy = nullptr;
  decltype(&cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&cuMemcpyHtoDAsync_v2) MemcpyHtoDAsync = nullptr;
  decltype(&cuMemcpyDtoH_v2) MemcpyDtoH = nullptr;
  decltype(&cuEventCreate) EventCreate = nullptr;
  decltype(&cuEventRecord) EventRecord = nullptr;
  decltype(&cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&cuEventDestroy_v2) EventDestroy = nullptr;
};

// cuFile's ABI, as documented for GDS; declared here because its header is not part of
// every toolkit.
struct CuFileError {
  int err;
  int cu_err;
};
struct CuFileDescr {
  int type;  // 1: a POSIX descriptor
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct CuFile {
  CuFileError (*DriverOpen)() = nullptr;
  CuFileError (*HandleRegister)(void** handle, CuFileDescr* descr) = nullptr;
  void (*HandleDeregister)(void* handle) = nullptr;
  ssize_t (*Read)(void* handle, void* device, size_t bytes, off_t offset,
                  off_t device_offset) = nullptr;
};

template <typename Fn>
bool Resolve(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  return fn != nullptr;
}

void* OpenFirst(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return library;
  }
  return nullptr;
}

class CudaStager : public Stager {
 public:
  // Null, with `why` set, when no usable device is found.
  static std::unique_ptr<CudaStager> Open(std::string* why);

  ~CudaStager() override;

  std::string_view name() const override { return "cuda"; }
  bool on_device() const override { return true; }
  std::string description() const override { return description_; }

  Status RegisterHost(void* base, size_t bytes) override {
    Bind();
    return Check(cu_.MemHostRegister(base, bytes, 0), "register host memory");
  }
  void UnregisterHost(void* base) override {
    Bind();
    cu_.MemHostUnregister(base);
  }
  Result<void*> AllocateDevice(size_t bytes) override {
    Bind();
    CUdeviceptr p = 0;
    if (Status s = Check(cu_.MemAlloc(&p, bytes), "allocate device memory"); !s) return s.error();
    return reinterpret_cast<void*>(p);
  }
  void FreeDevice(void* pointer) override {
    Bind();
    cu_.MemFree(reinterpret_cast<CUdeviceptr>(pointer));
  }
  Result<void*> AllocatePinned(size_t bytes) override {
    Bind();
    void* p = nullptr;
    if (Status s = Check(cu_.MemAllocHost(&p, bytes), "allocate pinned memory"); !s) {
      return s.error();
    }
    return p;
  }
  void FreePinned(void* pointer) override {
    Bind();
    cu_.MemFreeHost(pointer);
  }
  Result<StreamId> CreateStream() override;
  void DestroyStream(StreamId stream) override;
  Status CopyToDevice(void* device, const void* source, size_t bytes, StreamId stream) override {
    Bind();
    return Check(
        cu_.MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device), source, bytes, Stream(stream)),
        "copy to the device");
  }
  Result<uint64_t> Fence(StreamId stream) override;
  Status Wait(uint64_t fence) override;
  Status Synchronize(StreamId stream) override {
    Bind();
    return Check(cu_.StreamSynchronize(Stream(stream)), "wait for the device");
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    Bind();
    return Check(cu_.MemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(device), bytes),
                 "copy from the device");
  }
  Result<size_t> ReadDirect(int fd, uint64_t offset, void* device, size_t bytes) override;
  bool has_direct_reads() const override { return cufile_ready_; }

 private:
  Status Check(CUresult rc, std::string_view what) const {
    if (rc == CUDA_SUCCESS) return Ok{};
    return Fail(EIO, "cannot {}: CUDA error {} ({})", what, static_cast<int>(rc), ErrorText(rc));
  }
  std::string ErrorText(CUresult rc) const {
    const char* text = nullptr;
    return cu_.GetErrorString(rc, &text) == CUDA_SUCCESS && text ? text : "unknown";
  }
  // Driver calls act on the calling thread's current context; the client calls from its
  // own threads, so each call makes the device's primary context current first (cheap).
  void Bind() const { cu_.CtxSetCurrent(context_); }
  CUstream Stream(StreamId id) {
    std::lock_guard lock(mu_);
    return id > 0 && static_cast<size_t>(id) <= streams_.size() ? streams_[id - 1] : nullptr;
  }
  void OpenCuFile();

  Driver cu_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CuFile cf_;
  bool cufile_ready_ = false;
  std::string description_;
  std::mutex mu_;
  std::vector<CUstream> streams_;       // by StreamId - 1; guarded by mu_
  std::map<uint64_t, CUevent> fences_;  // guarded by mu_
  uint64_t next_fence_ = 0;             // guarded by mu_
  // A registered descriptor, and the file it was open on: descriptor numbers are reused
  // once the client closes a blob, and a handle must never read another file.
  struct CuFileHandle {
    void* handle = nullptr;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  std::map<int, CuFileHandle> cufile_handles_;  // by fd; guarded by mu_
};

CudaStager::~CudaStager() {
  for (auto& [fd, h] : cufile_handles_) cf_.HandleDeregister(h.handle);
  if (context_) cu_.PrimaryCtxRelease(device_);
}

// Every entry point of the driver that staging calls; false when one is missing.
bool ResolveDriver(void* library, Driver& cu) {
  return Resolve(library, "cuInit", cu.Init) &&
         Resolve(library, "cuGetErrorString", cu.GetErrorString) &&
         Resolve(library, "cuDeviceGetCount", cu.DeviceGetCount) &&
         Resolve(library, "cuDeviceGet", cu.DeviceGet) &&
         Resolve(library, "cuDeviceGetName", cu.DeviceGetName) &&
         Resolve(library, "cuDeviceTotalMem_v2", cu.DeviceTotalMem) &&
         Resolve(library, "cuDevicePrimaryCtxRetain", cu.PrimaryCtxRetain) &&
         Resolve(library, "cuDevicePrimaryCtxRelease_v2", cu.PrimaryCtxRelease) &&
         Resolve(library, "cuCtxSetCurrent", cu.CtxSetCurrent) &&
         Resolve(library, "cuMemHostRegister_v2", cu.MemHostRegister) &&
         Resolve(library, "cuMemHostUnregister", cu.MemHostUnregister) &&
         Resolve(library, "cuMemAlloc_v2", cu.MemAlloc) &&
         Resolve(library, "cuMemFree_v2", cu.MemFree) &&
         Resolve(library, "cuMemAllocHost_v2", cu.MemAllocHost) &&
         Resolve(library, "cuMemFreeHost", cu.MemFreeHost) &&
         Resolve(library, "cuStreamCreate", cu.StreamCreate) &&
         Resolve(library, "cuStreamDestroy_v2", cu.StreamDestroy) &&
         Resolve(library, "cuStreamSynchronize", cu.StreamSynchronize) &&
         Resolve(library, "cuMemcpyHtoDAsync_v2", cu.MemcpyHtoDAsync) &&
         Resolve(library, "cuMemcpyDtoH_v2", cu.MemcpyDtoH) &&
         Resolve(library, "cuEventCreate", cu.EventCreate) &&
         Resolve(library, "cuEventRecord", cu.EventRecord) &&
         Resolve(library, "cuEventSynchronize", cu.EventSynchronize) &&
         Resolve(library, "cuEventDestroy_v2", cu.EventDestroy);
}

std::unique_ptr<CudaStager> CudaStager::Open(std::string* why) {
  void* library = OpenFirst({"libcuda.so.1", "libcuda.so"});
  if (library == nullptr) {
    *why = "no CUDA driver (libcuda.so.1) on this host";
    return nullptr;
  }
  auto stager = std::unique_ptr<CudaStager>(new CudaStager());
  Driver& cu = stager->cu_;
  const bool all = ResolveDriver(library, cu);
  if (!all) {
    *why = fmt::format("the CUDA driver lacks an entry point: {}", dlerror());
    return nullptr;
  }
  if (const CUresult rc = cu.Init(0); rc != CUDA_SUCCESS) {
    *why = rc == CUDA_ERROR_NO_DEVICE
               ? "no CUDA device"
               : fmt::format("the CUDA driver does not start: {}", stager->ErrorText(rc));
    return nullptr;
  }
  int devices = 0;
  if (const CUresult rc = cu.DeviceGetCount(&devices); rc != CUDA_SUCCESS || devices == 0) {
    *why = rc == CUDA_SUCCESS ? "no CUDA device"
                              : fmt::format("no usable CUDA device: {}", stager->ErrorText(rc));
    return nullptr;
  }
  if (cu.DeviceGet(&stager->device_, 0) != CUDA_SUCCESS ||
      cu.PrimaryCtxRetain(&stager->context_, stager->device_) != CUDA_SUCCESS) {
    *why = "cannot open CUDA device 0";
    stager->context_ = nullptr;
    return nullptr;
  }
  char name[256] = {};
  size_t memory = 0;
  cu.DeviceGetName(name, sizeof(name) - 1, stager->device_);
  cu.DeviceTotalMem(&memory, stager->device_);
  stager->description_ = fmt::format("{} ({:.0f} GiB)", name, memory / 1073741824.0);
  stager->Bind();
  stager->OpenCuFile();
  return stager;
}

void CudaStager::OpenCuFile() {
  void* library = OpenFirst({"libcufile.so.0", "libcufile.so"});
  if (library == nullptr || !Resolve(library, "cuFileDriverOpen", cf_.DriverOpen) ||
      !Resolve(library, "cuFileHandleRegister", cf_.HandleRegister) ||
      !Resolve(library, "cuFileHandleDeregister", cf_.HandleDeregister) ||
      !Resolve(library, "cuFileRead", cf_.Read)) {
    description_ += ", no cuFile";
    return;
  }
  const CuFileError opened = cf_.DriverOpen();
  cufile_ready_ = opened.err == 0;
  description_ += cufile_ready_ ? ", cuFile (GPUDirect Storage)"
                                : fmt::format(", cuFile driver unavailable ({})", opened.err);
}

Result<StreamId> CudaStager::CreateStream() {
  Bind();
  CUstream stream = nullptr;
  if (Status s = Check(cu_.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "make a stream"); !s) {
    return s.error();
  }
  std::lock_guard lock(mu_);
  streams_.push_back(stream);
  return static_cast<StreamId>(streams_.size());
}

void CudaStager::DestroyStream(StreamId id) {
  Bind();
  CUstream stream = Stream(id);
  if (stream != nullptr) cu_.StreamDestroy(stream);
  std::lock_guard lock(mu_);
  if (id > 0 && static_cast<size_t>(id) <= streams_.size()) streams_[id - 1] = nullptr;
}

Result<uint64_t> CudaStager::Fence(StreamId stream) {
  Bind();
  CUevent event = nullptr;
  if (Status s = Check(cu_.EventCreate(&event, CU_EVENT_DISABLE_TIMING), "make an event"); !s) {
    return s.error();
  }
  if (Status s = Check(cu_.EventRecord(event, Stream(stream)), "record an event"); !s) {
    cu_.EventDestroy(event);
    return s.error();
  }
  std::lock_guard lock(mu_);
  fences_[++next_fence_] = event;
  return next_fence_;
}

Status CudaStager::Wait(uint64_t fence) {
  Bind();
  CUevent event = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = fences_.find(fence);
    if (it == fences_.end()) return Ok{};
    event = it->second;
    fences_.erase(it);
  }
  Status s = Check(cu_.EventSynchronize(event), "wait for a copy");
  cu_.EventDestroy(event);
  return s;
}

Result<size_t> CudaStager::ReadDirect(int fd, uint64_t offset, void* device, size_t bytes) {
  if (!cufile_ready_) return Fail(ENOTSUP, "no cuFile driver");
  struct stat st {};
  if (fstat(fd, &st) != 0) return Fail(errno, "cannot read descriptor {}: {}", fd, strerror(errno));
  void* handle = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = cufile_handles_.find(fd);
    if (it != cufile_handles_.end() &&
        (it->second.dev != st.st_dev || it->second.ino != st.st_ino)) {
      cf_.HandleDeregister(it->second.handle);  // the number now names another file
      cufile_handles_.erase(it);
      it = cufile_handles_.end();
    }
    if (it == cufile_handles_.end()) {
      CuFileDescr descr{};
      descr.type = 1;
      descr.handle.fd = fd;
      const CuFileError rc = cf_.HandleRegister(&handle, &descr);
      if (rc.err != 0) return Fail(ENOTSUP, "cuFile cannot read descriptor {} ({})", fd, rc.err);
      it = cufile_handles_.emplace(fd, CuFileHandle{handle, st.st_dev, st.st_ino}).first;
    }
    handle = it->second.handle;
  }
  Bind();
  const ssize_t n = cf_.Read(handle, device, bytes, static_cast<off_t>(offset), 0);
  if (n < 0) return Fail(EIO, "cuFile read failed ({})", n);
  return static_cast<size_t>(n);
}

}  // namespace

std::unique_ptr<Stager> MakeDeviceStager() {
  std::string why;
  if (auto cuda = CudaStager::Open(&why)) return cuda;
  return MakeNoDeviceStager(why);
}

}  // namespace gpufs::gpu
