// One exchange with a store through its attempts (transfer_loop.h runs them): the curl
// handle of the attempt in progress, the keys it was signed with, and the answer as it
// comes in, its status and headers read here and its body written to the exchange's sink.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "source/remote/address/exchange.h"
#include "source/remote/address/store_config.h"
#include "source/remote/transfer/store_stats.h"

namespace gpufs::remote {

// One exchange through its attempts. Owned by exactly one of the loop's queues at a time.
struct Transfer {
  Exchange exchange;
  StoreCounters* counters = nullptr;  // the loop's, shared by the store's loops
  Reply reply;                        // of the attempt in progress
  unsigned attempts = 0;
  std::chrono::steady_clock::time_point first_start;
  std::chrono::steady_clock::time_point attempt_start;
  std::string signed_for;     // the region the attempt in progress was signed (or sent) for
  unsigned region_moves = 0;  // times a wrong-region answer sent it again
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::shared_ptr<const Credentials> keys;  // of the attempt in progress; null: unsigned
  bool renewed = false;                     // the keys were refused once and renewed
  uint64_t refresh_mark = 0;                // the provider's Attempts() when renewal began
  std::chrono::steady_clock::time_point keys_wait_until;
  bool sink_stopped = false;  // the write callback ended the transfer on purpose
  char error[CURL_ERROR_SIZE] = {};

  ~Transfer() { curl_slist_free_all(headers); }

  static size_t OnHeader(char* data, size_t size, size_t count, void* self);
  static size_t OnBody(char* data, size_t size, size_t count, void* self);
  size_t Body(const char* data, size_t n);
};

}  // namespace gpufs::remote
