// The CUDA stager. The runtime (libcudart) and cuFile (libcufile) are opened with dlopen
// when first needed, never linked: the same binary runs on a host with no driver, no
// device or no GDS, and says which is missing. Only the toolkit's headers are used here.
#include <cuda_runtime_api.h>
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

// The runtime entry points gpufs uses, resolved by name from the library.
struct Cudart {
  decltype(&cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&cudaGetDeviceProperties) GetDeviceProperties = nullptr;
  decltype(&cudaGetErrorString) GetErrorString = nullptr;
  decltype(&cudaHostRegister) HostRegister = nullptr;
  decltype(&cudaHostUnregister) HostUnregister = nullptr;
  decltype(&cudaMalloc) Malloc = nullptr;
  decltype(&cudaFree) Free = nullptr;
  decltype(&cudaMallocHost) MallocHost = nullptr;
  decltype(&cudaFreeHost) FreeHost = nullptr;
  decltype(&cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
  decltype(&cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(&cudaStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&cudaMemcpyAsync) MemcpyAsync = nullptr;
  decltype(&cudaMemcpy) Memcpy = nullptr;
  decltype(&cudaEventCreateWithFlags) EventCreateWithFlags = nullptr;
  decltype(&cudaEventRecord) EventRecord = nullptr;
  decltype(&cudaEventSynchronize) EventSynchronize = nullptr;
  decltype(&cudaEventDestroy) EventDestroy = nullptr;
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
    return Check(rt_.HostRegister(base, bytes, cudaHostRegisterDefault), "register host memory");
  }
  void UnregisterHost(void* base) override { rt_.HostUnregister(base); }
  Result<void*> AllocateDevice(size_t bytes) override {
    void* p = nullptr;
    if (Status s = Check(rt_.Malloc(&p, bytes), "allocate device memory"); !s) return s.error();
    return p;
  }
  void FreeDevice(void* pointer) override { rt_.Free(pointer); }
  Result<void*> AllocatePinned(size_t bytes) override {
    void* p = nullptr;
    if (Status s = Check(rt_.MallocHost(&p, bytes), "allocate pinned memory"); !s) {
      return s.error();
    }
    return p;
  }
  void FreePinned(void* pointer) override { rt_.FreeHost(pointer); }
  Result<StreamId> CreateStream() override;
  void DestroyStream(StreamId stream) override;
  Status CopyToDevice(void* device, const void* source, size_t bytes, StreamId stream) override {
    return Check(rt_.MemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, Stream(stream)),
                 "copy to the device");
  }
  Result<uint64_t> Fence(StreamId stream) override;
  Status Wait(uint64_t fence) override;
  Status Synchronize(StreamId stream) override {
    return Check(rt_.StreamSynchronize(Stream(stream)), "wait for the device");
  }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    return Check(rt_.Memcpy(host, device, bytes, cudaMemcpyDeviceToHost), "copy from the device");
  }
  Result<size_t> ReadDirect(int fd, uint64_t offset, void* device, size_t bytes) override;
  bool has_direct_reads() const override { return cufile_ready_; }

 private:
  Status Check(cudaError_t rc, std::string_view what) const {
    if (rc == cudaSuccess) return Ok{};
    return Fail(EIO, "cannot {}: CUDA error {} ({})", what, static_cast<int>(rc),
                rt_.GetErrorString(rc));
  }
  cudaStream_t Stream(StreamId id) {
    std::lock_guard lock(mu_);
    return id > 0 && static_cast<size_t>(id) <= streams_.size() ? streams_[id - 1] : nullptr;
  }
  void OpenCuFile();

  Cudart rt_;
  CuFile cf_;
  bool cufile_ready_ = false;
  std::string description_;
  std::mutex mu_;
  std::vector<cudaStream_t> streams_;       // by StreamId - 1; guarded by mu_
  std::map<uint64_t, cudaEvent_t> fences_;  // guarded by mu_
  uint64_t next_fence_ = 0;                 // guarded by mu_
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
}

std::unique_ptr<CudaStager> CudaStager::Open(std::string* why) {
  void* library =
      OpenFirst({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"});
  if (library == nullptr) {
    *why = "no CUDA runtime (libcudart.so) on this host";
    return nullptr;
  }
  auto stager = std::unique_ptr<CudaStager>(new CudaStager());
  Cudart& rt = stager->rt_;
  const bool all = Resolve(library, "cudaGetDeviceCount", rt.GetDeviceCount) &&
                   Resolve(library, "cudaGetDeviceProperties", rt.GetDeviceProperties) &&
                   Resolve(library, "cudaGetErrorString", rt.GetErrorString) &&
                   Resolve(library, "cudaHostRegister", rt.HostRegister) &&
                   Resolve(library, "cudaHostUnregister", rt.HostUnregister) &&
                   Resolve(library, "cudaMalloc", rt.Malloc) &&
                   Resolve(library, "cudaFree", rt.Free) &&
                   Resolve(library, "cudaMallocHost", rt.MallocHost) &&
                   Resolve(library, "cudaFreeHost", rt.FreeHost) &&
                   Resolve(library, "cudaStreamCreateWithFlags", rt.StreamCreateWithFlags) &&
                   Resolve(library, "cudaStreamDestroy", rt.StreamDestroy) &&
                   Resolve(library, "cudaStreamSynchronize", rt.StreamSynchronize) &&
                   Resolve(library, "cudaMemcpyAsync", rt.MemcpyAsync) &&
                   Resolve(library, "cudaMemcpy", rt.Memcpy) &&
                   Resolve(library, "cudaEventCreateWithFlags", rt.EventCreateWithFlags) &&
                   Resolve(library, "cudaEventRecord", rt.EventRecord) &&
                   Resolve(library, "cudaEventSynchronize", rt.EventSynchronize) &&
                   Resolve(library, "cudaEventDestroy", rt.EventDestroy);
  if (!all) {
    *why = fmt::format("the CUDA runtime lacks an entry point: {}", dlerror());
    return nullptr;
  }
  int devices = 0;
  if (const cudaError_t rc = rt.GetDeviceCount(&devices); rc != cudaSuccess || devices == 0) {
    *why = rc == cudaSuccess ? "no CUDA device"
                             : fmt::format("no usable CUDA device: {}", rt.GetErrorString(rc));
    return nullptr;
  }
  cudaDeviceProp properties{};
  rt.GetDeviceProperties(&properties, 0);
  stager->description_ =
      fmt::format("{} ({:.0f} GiB)", properties.name, properties.totalGlobalMem / 1073741824.0);
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
  cudaStream_t stream = nullptr;
  if (Status s = Check(rt_.StreamCreateWithFlags(&stream, cudaStreamNonBlocking), "make a stream");
      !s) {
    return s.error();
  }
  std::lock_guard lock(mu_);
  streams_.push_back(stream);
  return static_cast<StreamId>(streams_.size());
}

void CudaStager::DestroyStream(StreamId id) {
  cudaStream_t stream = Stream(id);
  if (stream != nullptr) rt_.StreamDestroy(stream);
  std::lock_guard lock(mu_);
  if (id > 0 && static_cast<size_t>(id) <= streams_.size()) streams_[id - 1] = nullptr;
}

Result<uint64_t> CudaStager::Fence(StreamId stream) {
  cudaEvent_t event = nullptr;
  if (Status s = Check(rt_.EventCreateWithFlags(&event, cudaEventDisableTiming), "make an event");
      !s) {
    return s.error();
  }
  if (Status s = Check(rt_.EventRecord(event, Stream(stream)), "record an event"); !s) {
    rt_.EventDestroy(event);
    return s.error();
  }
  std::lock_guard lock(mu_);
  fences_[++next_fence_] = event;
  return next_fence_;
}

Status CudaStager::Wait(uint64_t fence) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = fences_.find(fence);
    if (it == fences_.end()) return Ok{};
    event = it->second;
    fences_.erase(it);
  }
  Status s = Check(rt_.EventSynchronize(event), "wait for a copy");
  rt_.EventDestroy(event);
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
