// One-sided RDMA for Danaus's ucx transport: UCP memory registration, remote keys, get and put.
//
// rma.py loads this library with ctypes; rma_build.py compiles it on first use. It has a UCP
// context and worker of its own, made and used by one thread of its own and no other: every
// UCP call is made there, so nothing here races with ucxx's progress thread or with Python,
// and the worker needs no locks (UCS_THREAD_MODE_SINGLE). Other threads queue commands and
// wake the thread with ucp_worker_signal, which UCX allows from any thread. The thread sleeps in poll() on the
// worker's event descriptor while there is nothing to do, so an idle process spends no CPU on
// it, and it serves the owner's side of UCX's emulated transfers (TCP) in C, with no Python and
// no GIL. Finished transfers are queued and announced on an eventfd that Python polls.
//
// Why a context of its own rather than ucxx's: ucxx's context has the TAG and AM features,
// which enable rendezvous; with rendezvous and peer-failure error handling, UCP only takes
// RMA lanes whose memory domain can invalidate registrations, which rules out CMA, the one
// zero-copy path between processes of a host, and leaves TCP emulation. Without peer-failure
// handling, a dead owner is a fatal error in the reader (CMA's ESRCH aborts the process) and a
// forced close leaves emulated gets outstanding, whose late replies still land.
//
// Each transfer first reads the buffer's validity cell: an 8-byte word, in a page registered
// once per process, holding the registration's generation while it lives and 0 once it is
// dropped. UCX's emulated transports (TCP, CMA) do not check remote keys, so this check is
// what makes a transfer of a dropped buffer fail instead of reaching memory its owner has
// released. Cell pages are never unmapped or freed, so a late check never faults.

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

namespace {

// Statuses of our own; UCX's are 0 (UCS_OK) or negative.
constexpr int DROPPED = 1;  // the validity cell no longer holds the handle's generation
constexpr int BAD_KEY = 2;  // a remote key that does not unpack
constexpr int CLOSED  = 3;  // the peer was closed before the transfer could start

constexpr size_t CELLS_PER_PAGE = 512;
constexpr auto BLOCKING_WAIT    = std::chrono::seconds(10);

void setError(char* error, size_t size, const std::string& message)
{
  if (error != nullptr && size > 0) std::snprintf(error, size, "%s", message.c_str());
}

std::string statusText(ucs_status_t status) { return ucs_status_string(status); }

struct CellPage {
  uint64_t* words{nullptr};
  ucp_mem_h memory{nullptr};
  std::string key;
};

struct Cell {
  CellPage* page{nullptr};
  size_t index{0};

  std::atomic<uint64_t>& word() const
  {
    return *reinterpret_cast<std::atomic<uint64_t>*>(page->words + index);
  }
  uint64_t address() const { return reinterpret_cast<uint64_t>(page->words + index); }
};

struct Region {
  ucp_mem_h memory{nullptr};
  std::string key;
  Cell cell;
  uint64_t generation{0};
};

class Service;

struct Peer {
  Service* service{nullptr};
  std::weak_ptr<Peer> self;
  std::string address;
  ucp_ep_h endpoint{nullptr};
  bool closed{false};
};

// One transfer: the check of its validity cell, the move of its bytes, and for a put the
// flush that makes them the owner's. Owned by whichever step runs next; finish deletes it.
struct Transfer {
  enum class Stage { Check, Move, Flush };
  Service* service{nullptr};
  uint64_t token{0};
  std::shared_ptr<Peer> peer;
  Stage stage{Stage::Check};
  bool write{false};
  void* local{nullptr};
  size_t length{0};
  ucs_memory_type_t localType{UCS_MEMORY_TYPE_HOST};
  uint64_t remote{0};
  std::string key;
  uint64_t cellAddress{0};
  std::string cellKey;
  uint64_t generation{0};
  uint64_t cellValue{0};
  ucp_rkey_h remoteKey{nullptr};
  ucp_rkey_h remoteCellKey{nullptr};
};

class Service {
 public:
  // Starts the thread, which makes the context and the worker; `netDevices`, unless empty,
  // limits the network devices UCX may use (as UCX_NET_DEVICES would).
  explicit Service(const std::string& netDevices) : _random(std::random_device{}())
  {
    _doneFd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (_doneFd < 0) throw std::runtime_error("eventfd failed");
    std::promise<std::string> started;
    std::future<std::string> failure = started.get_future();
    _thread = std::thread([this, netDevices, &started]() {
      pthread_setname_np(pthread_self(), "danaus-rma");
      try {
        open(netDevices);
      } catch (const std::exception& e) {
        started.set_value(e.what());
        return;
      }
      started.set_value("");
      run();
    });
    std::string reason = failure.get();
    if (!reason.empty()) {
      _thread.join();
      ::close(_doneFd);
      throw std::runtime_error(reason);
    }
  }

  int eventfd() const { return _doneFd; }

  uint64_t memoryTypes() const { return _memoryTypes; }

  // ---- any thread ------------------------------------------------------------------------

  // Queues fn for the service's thread and returns at once.
  void later(std::function<void()> fn)
  {
    {
      std::lock_guard<std::mutex> lock(_commandsMutex);
      _commands.push_back(std::move(fn));
    }
    ucp_worker_signal(_worker);
  }

  // Runs fn on the service's thread and waits for it; false if it did not run in time.
  bool blocking(std::function<void()> fn)
  {
    auto state = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto ran   = std::make_shared<bool>(false);
    later([fn = std::move(fn), state, ran]() {
      fn();
      std::lock_guard<std::mutex> lock(state->first);
      *ran = true;
      state->second.notify_all();
    });
    std::unique_lock<std::mutex> lock(state->first);
    return state->second.wait_for(lock, BLOCKING_WAIT, [&ran]() { return *ran; });
  }

  void post(uint64_t token, int status)
  {
    {
      std::lock_guard<std::mutex> lock(_doneMutex);
      _done.emplace_back(token, status);
    }
    uint64_t one    = 1;
    ssize_t written = ::write(_doneFd, &one, sizeof(one));
    (void)written;  // a full counter still wakes the reader, which drains the whole queue
  }

  size_t completions(uint64_t* tokens, int32_t* statuses, size_t capacity)
  {
    std::lock_guard<std::mutex> lock(_doneMutex);
    size_t count = std::min(capacity, _done.size());
    for (size_t i = 0; i < count; ++i) {
      tokens[i]   = _done[i].first;
      statuses[i] = _done[i].second;
    }
    _done.erase(_done.begin(), _done.begin() + static_cast<std::ptrdiff_t>(count));
    return count;
  }

  // ---- the service's thread ---------------------------------------------------------------

  std::string address()
  {
    ucp_address_t* address = nullptr;
    size_t length          = 0;
    check(ucp_worker_get_address(_worker, &address, &length), "ucp_worker_get_address");
    std::string copy(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(_worker, address);
    return copy;
  }

  Region* map(void* address, size_t length, ucs_memory_type_t type)
  {
    auto region    = std::make_unique<Region>();
    region->memory = mapMemory(address, length, type);
    region->key    = packKey(region->memory);
    region->cell   = takeCell();
    do {
      region->generation = _random();
    } while (region->generation == 0);
    region->cell.word().store(region->generation, std::memory_order_release);
    _live.insert(region.get());
    return region.release();
  }

  // Unmaps, then reports `token` once the worker has flushed what it had under way (replies
  // an emulated transport was still sending out of the memory).
  void unmap(Region* region, uint64_t token)
  {
    _live.erase(region);
    ucp_mem_unmap(_context, region->memory);
    _freeCells.push_back(region->cell);
    delete region;
    auto* pending             = new std::pair<Service*, uint64_t>(this, token);
    ucp_request_param_t param = {};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send             = [](void* request, ucs_status_t status, void* data) {
      auto* pending = static_cast<std::pair<Service*, uint64_t>*>(data);
      pending->first->post(pending->second, status);
      delete pending;
      ucp_request_free(request);
    };
    param.user_data          = pending;
    ucs_status_ptr_t request = ucp_worker_flush_nbx(_worker, &param);
    if (!UCS_PTR_IS_PTR(request)) {
      delete pending;
      post(token, UCS_PTR_STATUS(request));
    }
  }

  void start(Transfer* t)
  {
    Peer& peer = *t->peer;
    t->service = this;
    if (peer.closed) return finish(t, CLOSED);
    if (peer.endpoint == nullptr) {
      ucs_status_t status = connect(peer);
      if (status != UCS_OK) return finish(t, status);
    }
    if (t->key.empty() || t->cellKey.empty() ||
        ucp_ep_rkey_unpack(peer.endpoint, t->key.data(), &t->remoteKey) != UCS_OK ||
        ucp_ep_rkey_unpack(peer.endpoint, t->cellKey.data(), &t->remoteCellKey) != UCS_OK)
      return finish(t, BAD_KEY);
    ucp_request_param_t param = requestParam(t, UCS_MEMORY_TYPE_HOST);
    issue(t,
          ucp_get_nbx(peer.endpoint,
                      &t->cellValue,
                      sizeof(t->cellValue),
                      t->cellAddress,
                      t->remoteCellKey,
                      &param));
  }

  // Ends the peer's endpoint at once: its transfers under way complete with an error.
  void close(Peer& peer)
  {
    peer.closed = true;
    if (peer.endpoint == nullptr) return;
    ucp_request_param_t param = {};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags               = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request  = ucp_ep_close_nbx(peer.endpoint, &param);
    if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);  // released once it completes
    peer.endpoint = nullptr;
  }

  // Unmaps what is still mapped, stops the thread, then destroys the worker (and the endpoints
  // it still holds) and the context. The cell pages' memory is not freed: a late check from a
  // peer must still find it mapped.
  void shutdown()
  {
    later([this]() {
      for (Region* region : _live) {
        ucp_mem_unmap(_context, region->memory);
        delete region;
      }
      _live.clear();
      for (CellPage* page : _pages)
        ucp_mem_unmap(_context, page->memory);
      _running = false;
    });
    _thread.join();
    ::close(_doneFd);
  }

 private:
  static void check(ucs_status_t status, const char* what)
  {
    if (status != UCS_OK) throw std::runtime_error(std::string(what) + ": " + statusText(status));
  }

  // The context and the worker, made on the service's thread, the only one that uses them.
  void open(const std::string& netDevices)
  {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    // No rendezvous: this context moves no messages. With rendezvous enabled, peer-failure
    // handling would demand memory domains that can invalidate, and exclude CMA.
    ucs_status_t status = ucp_config_modify(config, "RNDV_THRESH", "inf");
    if (status == UCS_OK && !netDevices.empty())
      status = ucp_config_modify(config, "NET_DEVICES", netDevices.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      check(status, "ucp_config_modify");
    }
    ucp_params_t params = {};
    params.field_mask   = UCP_PARAM_FIELD_FEATURES;
    params.features     = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    status              = ucp_init(&params, config, &_context);
    ucp_config_release(config);
    check(status, "ucp_init");
    ucp_worker_params_t worker = {};
    worker.field_mask          = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker.thread_mode         = UCS_THREAD_MODE_SINGLE;
    status                     = ucp_worker_create(_context, &worker, &_worker);
    if (status == UCS_OK) {
      status = ucp_worker_get_efd(_worker, &_workerFd);
      if (status != UCS_OK) ucp_worker_destroy(_worker);
    }
    if (status != UCS_OK) {
      ucp_cleanup(_context);
      check(status, "ucp_worker_create");
    }
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(_context, &attr) == UCS_OK) _memoryTypes = attr.memory_types;
  }

  // Serves commands and progresses the worker until shutdown, then destroys both.
  void run()
  {
    while (_running) {
      std::deque<std::function<void()>> commands;
      {
        std::lock_guard<std::mutex> lock(_commandsMutex);
        commands.swap(_commands);
      }
      for (auto& command : commands)
        command();
      if (!commands.empty() || ucp_worker_progress(_worker) != 0) continue;
      ucs_status_t status = ucp_worker_arm(_worker);
      if (status == UCS_ERR_BUSY) continue;
      struct pollfd ready = {_workerFd, POLLIN, 0};
      ::poll(&ready, 1, -1);
    }
    ucp_worker_destroy(_worker);
    ucp_cleanup(_context);
  }

  ucs_status_t connect(Peer& peer)
  {
    ucp_ep_params_t params = {};
    params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address         = reinterpret_cast<const ucp_address_t*>(peer.address.data());
    params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb  = [](void* arg, ucp_ep_h, ucs_status_t) {
      // UCP has failed the endpoint's requests; it must still be closed, after this callback.
      // (The peer is alive: it is freed only after a close, which silences this callback.)
      auto* failed = static_cast<Peer*>(arg);
      failed->service->later([peer = failed->self]() {
        if (auto alive = peer.lock()) alive->service->close(*alive);
      });
    };
    params.err_handler.arg = &peer;
    peer.service           = this;
    ucs_status_t status    = ucp_ep_create(_worker, &params, &peer.endpoint);
    if (status != UCS_OK) peer.endpoint = nullptr;
    return status;
  }

  static void completed(void* request, ucs_status_t status, void* data)
  {
    ucp_request_free(request);
    auto* t = static_cast<Transfer*>(data);
    t->service->advance(t, status);
  }

  static ucp_request_param_t requestParam(Transfer* t, ucs_memory_type_t type)
  {
    ucp_request_param_t param = {};
    param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.cb.send     = completed;
    param.user_data   = t;
    param.memory_type = type;
    return param;
  }

  // A step was posted: it completes later (its callback advances), now, or failed.
  void issue(Transfer* t, ucs_status_ptr_t request)
  {
    if (!UCS_PTR_IS_PTR(request)) advance(t, UCS_PTR_STATUS(request));
  }

  void advance(Transfer* t, ucs_status_t status)
  {
    if (status != UCS_OK) return finish(t, status);
    ucp_ep_h endpoint = t->peer->endpoint;
    if (endpoint == nullptr) return finish(t, CLOSED);
    switch (t->stage) {
      case Transfer::Stage::Check: {
        if (t->cellValue != t->generation) return finish(t, DROPPED);
        t->stage                  = Transfer::Stage::Move;
        ucp_request_param_t param = requestParam(t, t->localType);
        if (t->write)
          issue(t, ucp_put_nbx(endpoint, t->local, t->length, t->remote, t->remoteKey, &param));
        else
          issue(t, ucp_get_nbx(endpoint, t->local, t->length, t->remote, t->remoteKey, &param));
        return;
      }
      case Transfer::Stage::Move: {
        if (!t->write) return finish(t, UCS_OK);
        // A put completes when its source may be reused; the flush, once the owner has it.
        t->stage                  = Transfer::Stage::Flush;
        ucp_request_param_t param = requestParam(t, UCS_MEMORY_TYPE_HOST);
        param.op_attr_mask &= ~UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        issue(t, ucp_ep_flush_nbx(endpoint, &param));
        return;
      }
      case Transfer::Stage::Flush: return finish(t, UCS_OK);
    }
  }

  void finish(Transfer* t, int status)
  {
    if (t->remoteKey != nullptr) ucp_rkey_destroy(t->remoteKey);
    if (t->remoteCellKey != nullptr) ucp_rkey_destroy(t->remoteCellKey);
    post(t->token, status);
    delete t;
  }

  ucp_mem_h mapMemory(void* address, size_t length, ucs_memory_type_t type)
  {
    ucp_mem_map_params_t params = {};
    params.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    params.address     = address;
    params.length      = length;
    params.memory_type = type;
    ucp_mem_h memory   = nullptr;
    check(ucp_mem_map(_context, &params, &memory), "ucp_mem_map");
    return memory;
  }

  std::string packKey(ucp_mem_h memory)
  {
    void* packed        = nullptr;
    size_t size         = 0;
    ucs_status_t status = ucp_rkey_pack(_context, memory, &packed, &size);
    if (status != UCS_OK) {
      ucp_mem_unmap(_context, memory);
      check(status, "ucp_rkey_pack");
    }
    std::string key(static_cast<const char*>(packed), size);
    ucp_rkey_buffer_release(packed);
    return key;
  }

  Cell takeCell()
  {
    if (_freeCells.empty()) {
      auto* page  = new CellPage();
      page->words = static_cast<uint64_t*>(
        std::aligned_alloc(4096, CELLS_PER_PAGE * sizeof(uint64_t)));
      if (page->words == nullptr) throw std::bad_alloc();
      std::memset(page->words, 0, CELLS_PER_PAGE * sizeof(uint64_t));
      page->memory =
        mapMemory(page->words, CELLS_PER_PAGE * sizeof(uint64_t), UCS_MEMORY_TYPE_HOST);
      page->key = packKey(page->memory);
      _pages.push_back(page);
      for (size_t i = CELLS_PER_PAGE; i > 0; --i)
        _freeCells.push_back(Cell{page, i - 1});
    }
    Cell cell = _freeCells.back();
    _freeCells.pop_back();
    return cell;
  }

  ucp_context_h _context{nullptr};
  ucp_worker_h _worker{nullptr};
  int _workerFd{-1};
  int _doneFd{-1};
  uint64_t _memoryTypes{0};
  std::thread _thread;
  bool _running{true};  // the service's thread only
  std::mt19937_64 _random;
  std::mutex _commandsMutex;
  std::deque<std::function<void()>> _commands;
  std::mutex _doneMutex;
  std::vector<std::pair<uint64_t, int32_t>> _done;
  std::vector<CellPage*> _pages;       // the service's thread only
  std::vector<Cell> _freeCells;        // the service's thread only
  std::unordered_set<Region*> _live;  // the service's thread only
};

}  // namespace

extern "C" {

// A UCP context and worker of their own, with their thread, on the network devices named in
// `net_devices` (all if empty); NULL with the reason in `error`.
void* danaus_rma_open(const char* net_devices, char* error, size_t error_size)
{
  try {
    return new Service(net_devices);
  } catch (const std::exception& e) {
    setError(error, error_size, e.what());
    return nullptr;
  }
}

// Stops the service's thread and releases its worker and context.
void danaus_rma_shutdown(void* service)
{
  auto* self = static_cast<Service*>(service);
  self->shutdown();
  delete self;
}

int danaus_rma_eventfd(void* service) { return static_cast<Service*>(service)->eventfd(); }

// The memory types (a bit per ucs_memory_type_t) UCX can register in this process.
uint64_t danaus_rma_memory_types(void* service)
{
  return static_cast<Service*>(service)->memoryTypes();
}

// Copies the worker's address into `out`; its length, or 0 if it does not fit or failed.
size_t danaus_rma_address(void* service, char* out, size_t size)
{
  auto* self    = static_cast<Service*>(service);
  auto address  = std::make_shared<std::string>();
  bool ran      = self->blocking([=]() {
    try {
      *address = self->address();
    } catch (const std::exception&) {
    }
  });
  if (!ran || address->empty() || address->size() > size) return 0;
  std::memcpy(out, address->data(), address->size());
  return address->size();
}

// Registers [address, address + length) of memory type `type` (a ucs_memory_type_t), or
// returns NULL with the reason in `error`.
void* danaus_rma_map(
  void* service, void* address, size_t length, int type, char* error, size_t error_size)
{
  auto* self     = static_cast<Service*>(service);
  auto region    = std::make_shared<Region*>(nullptr);
  auto failure   = std::make_shared<std::string>();
  bool ran       = self->blocking([=]() {
    try {
      *region = self->map(address, length, static_cast<ucs_memory_type_t>(type));
    } catch (const std::exception& e) {
      *failure = e.what();
    }
  });
  if (!ran) *failure = "the RDMA thread did not answer within 10 s";
  if (*region == nullptr) setError(error, error_size, *failure);
  return *region;
}

// A region's packed remote key, its validity cell (address and the packed key of its page)
// and its generation. Each key's size is read as the buffer's capacity and written back as
// the key's length, 0 if it does not fit.
void danaus_rma_region(void* region,
                       char* key,
                       size_t* key_size,
                       uint64_t* cell_address,
                       char* cell_key,
                       size_t* cell_key_size,
                       uint64_t* generation)
{
  auto* r   = static_cast<Region*>(region);
  auto copy = [](const std::string& from, char* to, size_t* size) {
    if (from.size() > *size) {
      *size = 0;
      return;
    }
    std::memcpy(to, from.data(), from.size());
    *size = from.size();
  };
  copy(r->key, key, key_size);
  copy(r->cell.page->key, cell_key, cell_key_size);
  *cell_address = r->cell.address();
  *generation   = r->generation;
}

// Drops a registration: transfers that check from now on fail; `token` completes once the
// memory is unmapped and what the worker had under way is flushed.
void danaus_rma_unmap(void* service, void* region, uint64_t token)
{
  auto* self = static_cast<Service*>(service);
  auto* r    = static_cast<Region*>(region);
  r->cell.word().store(0, std::memory_order_release);
  self->later([self, r, token]() { self->unmap(r, token); });
}

// A connection-to-be to the worker at `address`; its endpoint is made by the first transfer.
void* danaus_rma_peer(const char* address, size_t size)
{
  auto* peer       = new std::shared_ptr<Peer>(std::make_shared<Peer>());
  (*peer)->self    = *peer;
  (*peer)->address = std::string(address, size);
  return peer;
}

// Starts a get (write == 0) into, or a put from, `local` (of memory type `local_type`) of
// `length` bytes at `remote` in the owner's memory; `token` completes with its status.
void danaus_rma_submit(void* service,
                       void* peer,
                       uint64_t token,
                       int write,
                       void* local,
                       size_t length,
                       int local_type,
                       uint64_t remote,
                       const char* key,
                       size_t key_size,
                       uint64_t cell_address,
                       const char* cell_key,
                       size_t cell_key_size,
                       uint64_t generation)
{
  auto* self     = static_cast<Service*>(service);
  auto* t        = new Transfer();
  t->token       = token;
  t->peer        = *static_cast<std::shared_ptr<Peer>*>(peer);
  t->write       = write != 0;
  t->local       = local;
  t->length      = length;
  t->localType   = static_cast<ucs_memory_type_t>(local_type);
  t->remote      = remote;
  t->key         = std::string(key, key_size);
  t->cellAddress = cell_address;
  t->cellKey     = std::string(cell_key, cell_key_size);
  t->generation  = generation;
  self->later([self, t]() { self->start(t); });
}

// Closes the peer's endpoint (its transfers under way complete with an error) and frees it.
void danaus_rma_close(void* service, void* peer)
{
  auto* self                   = static_cast<Service*>(service);
  auto* owned                  = static_cast<std::shared_ptr<Peer>*>(peer);
  std::shared_ptr<Peer> shared = *owned;
  delete owned;
  self->later([self, shared]() { self->close(*shared); });
}

// Moves up to `capacity` finished (token, status) pairs out; how many.
size_t danaus_rma_completions(void* service, uint64_t* tokens, int32_t* statuses, size_t capacity)
{
  return static_cast<Service*>(service)->completions(tokens, statuses, capacity);
}

// The ucs_memory_type_t of CUDA device memory.
int danaus_rma_cuda_type() { return UCS_MEMORY_TYPE_CUDA; }

// UCX's description of a status of its own (0 or negative).
const char* danaus_rma_status(int status)
{
  return ucs_status_string(static_cast<ucs_status_t>(status));
}

}  // extern "C"
