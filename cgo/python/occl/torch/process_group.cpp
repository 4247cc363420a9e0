// ProcessGroupOccl: occl as a c10d backend of torch.distributed.
//
// Every operation is issued through occl's non-blocking C ABI, so it is
// queued on the communicator in call order (the order every rank must
// follow) and progresses on occl's own threads. Work::wait calls occlWait on
// the calling thread: a blocking torch.distributed call pays no thread hop.
// A future (Work::getFuture, which DDP's reducer uses) is completed by the
// process group's Completer: its threads take turns at waiting for the
// operations whose futures were asked for, in issue order, and each
// completes (runs the callbacks of) the future of the operation it waited
// for once another has taken the turn: a callback may wait for another
// future. Work::wait and isCompleted of a work whose future was asked for
// wait for (or ask about) that completion, never run it. An operation whose
// future is asked for while an earlier one is pending, or within two
// seconds of the last time one was (or any, or none, as OCCL_FUTURE_OVERLAP
// says), is marked as overlapping its caller's computation
// (occlRequestOverlap): DDP's backward pass goes on computing while its
// buckets are reduced, and a wait that kept polling would take its core.
// No lock is held across occlWait, and a thread that may hold the GIL never
// waits for one that may need it (see State, releaseGIL).
//
// liboccl.so is loaded with dlopen from the path the Python package gives
// (the same library its ctypes layer uses), so one process holds one copy.

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

// ATen and torch's pybind11 glue rather than torch/extension.h, which
// brings in the whole C++ frontend (nn, optim) and almost doubles the
// extension's compile time.
#include <ATen/ATen.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include "occl.h"

namespace occl_torch {

// The functions of liboccl.so this backend calls.
#define OCCL_FUNCTIONS(X)                                                                         \
  X(occlGetLastError)                                                                             \
  X(occlCommInitRankConfig)                                                                       \
  X(occlCommDestroy)                                                                              \
  X(occlCommAbort)                                                                                \
  X(occlCommShrink)                                                                               \
  X(occlCommCount)                                                                                \
  X(occlCommUserRank)                                                                             \
  X(occlCommGrowConfig)                                                                           \
  X(occlJoinConfig)                                                                               \
  X(occlAllReduceAsync)                                                                           \
  X(occlBroadcastAsync)                                                                           \
  X(occlReduceAsync)                                                                              \
  X(occlAllGatherAsync)                                                                           \
  X(occlReduceScatterAsync)                                                                       \
  X(occlAllToAllAsync)                                                                            \
  X(occlAllToAllvAsync)                                                                           \
  X(occlGatherAsync)                                                                              \
  X(occlScatterAsync)                                                                             \
  X(occlBarrierAsync)                                                                             \
  X(occlSendAsync)                                                                                \
  X(occlRecvAsync)                                                                                \
  X(occlSendRecvAsync)                                                                            \
  X(occlWait)                                                                                     \
  X(occlTest)                                                                                     \
  X(occlRequestFree)                                                                              \
  X(occlRequestOverlap)

struct Lib {
#define OCCL_FIELD(name) decltype(&::name) name = nullptr;
  OCCL_FUNCTIONS(OCCL_FIELD)
#undef OCCL_FIELD
};

Lib lib;
std::once_flag libOnce;

// load resolves the functions from the library at path, once per process.
void load(const std::string& path) {
  std::string err;
  std::call_once(libOnce, [&] {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      err = std::string("cannot load ") + path + ": " + dlerror();
      return;
    }
#define OCCL_RESOLVE(name)                                                                        \
  lib.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                               \
  if (lib.name == nullptr) {                                                                      \
    err = path + " has no " #name ": it is older than this package";                              \
    return;                                                                                       \
  }
    OCCL_FUNCTIONS(OCCL_RESOLVE)
#undef OCCL_RESOLVE
  });
  TORCH_CHECK(err.empty(), "occl: ", err);
  TORCH_CHECK(lib.occlWait != nullptr, "occl: the library failed to load earlier in this process");
}

// Overlap is which operations whose futures are asked for are marked as
// overlapping their caller's computation (see Completer::overlaps).
enum class Overlap { kAuto, kAlways, kNever };

// futureOverlap reads OCCL_FUTURE_OVERLAP: "1" always, "0" never, unset or
// "auto" when an earlier future is still pending or was lately (see
// Completer::overlaps).
Overlap futureOverlap() {
  const char* v = std::getenv("OCCL_FUTURE_OVERLAP");
  if (v == nullptr || *v == 0 || std::string(v) == "auto") return Overlap::kAuto;
  if (std::string(v) == "1") return Overlap::kAlways;
  TORCH_CHECK(std::string(v) == "0", "occl: OCCL_FUTURE_OVERLAP=", v, ": want auto, 1 or 0");
  return Overlap::kNever;
}

// lastError is the calling thread's most recent occl failure.
std::string lastError() { return lib.occlGetLastError(nullptr); }

// check turns a failed call into a Python RuntimeError naming the call.
void check(occlResult_t r, const char* what) {
  TORCH_CHECK(r == occlSuccess, "occl ", what, ": ", lastError());
}

// dtypeOf maps a tensor's element type to occl's, or fails with a clear
// message. Bool travels as bytes where nothing is reduced.
occlDataType_t dtypeOf(const at::Tensor& t, bool reduces) {
  switch (t.scalar_type()) {
    case at::kChar: return occlInt8;
    case at::kByte: return occlUint8;
    case at::kInt: return occlInt32;
    case at::kLong: return occlInt64;
    case at::kHalf: return occlFloat16;
    case at::kBFloat16: return occlBfloat16;
    case at::kFloat: return occlFloat32;
    case at::kDouble: return occlFloat64;
    case at::kBool:
      if (!reduces) return occlUint8;
      break;
    default:
      break;
  }
  TORCH_CHECK(false, "occl: tensors of type ", t.scalar_type(),
              " are not supported", reduces ? " by reductions" : "",
              " (occl has int8, uint8, int32, int64, float16, bfloat16, float32 and float64",
              reduces ? "" : ", and moves bool as bytes", ")");
}

// checkTensor validates a tensor occl reads or writes in place.
void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "occl: ", what, " is on ", t.device(), ": occl moves CPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "occl: ", what, " is not a dense tensor");
  TORCH_CHECK(t.is_contiguous(), "occl: ", what, " is not contiguous (call .contiguous())");
}

// single returns the one tensor of a list, as the backend takes one per call.
at::Tensor& single(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "occl: ", what, ": expected 1 tensor, got ", ts.size());
  checkTensor(ts[0], what);
  return ts[0];
}

void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "occl: ", what, ": tensors of types ", a.scalar_type(), " and ",
              b.scalar_type());
}

occlRedOp_t redOpOf(const c10d::ReduceOp& op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return occlSum;
    case c10d::ReduceOp::PRODUCT: return occlProd;
    case c10d::ReduceOp::MIN: return occlMin;
    case c10d::ReduceOp::MAX: return occlMax;
    case c10d::ReduceOp::AVG: return occlAvg;
    default: break;
  }
  TORCH_CHECK(false, "occl: reduction ", static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(op)),
              " is not supported (SUM, PRODUCT, MIN, MAX and AVG are)");
}

// State is one issued operation: its request until it completes, the
// tensors it uses (kept alive until then), the copy-out that follows it and
// its outcome. Works made together by coalescing share one State.
//
// mu guards the fields and is only ever held for a few instructions: never
// across occlWait or occlTest, an epilogue, a future's callbacks or the
// release of a tensor (which may need the GIL, when C++ holds the last
// reference to a tensor whose Python object is gone). One thread at a time
// owns the request (waiting); the others wait on cv for the outcome.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  occlRequest_t req = nullptr;
  bool issued = false;
  bool waiting = false;  // a thread is in occlWait or occlTest on req
  bool completed = false;
  std::exception_ptr error;
  std::vector<at::Tensor> keep;
  std::function<void()> epilogue;
  std::vector<at::Tensor> outputs;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::atomic<bool> published{false};

  // finish records r, the outcome of the request, on the thread that owns
  // it (waiting set), without mu: it runs the epilogue, and releases the
  // tensors and the epilogue after unlocking.
  // e, if given, is the outcome instead.
  void finish(occlResult_t r, std::exception_ptr e = nullptr) {
    if (!e && r != occlSuccess) e = std::make_exception_ptr(std::runtime_error("occl: " + lastError()));
    std::function<void()> ep;
    std::vector<at::Tensor> k;
    {
      std::lock_guard<std::mutex> l(mu);
      ep = std::move(epilogue);
      epilogue = nullptr;
      k = std::move(keep);
      keep.clear();
    }
    if (!e && ep) {
      try {
        ep();
      } catch (...) {
        e = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> l(mu);
      req = nullptr;
      error = e;
      completed = true;
      waiting = false;
    }
    cv.notify_all();
    // ep and k are released here, with mu unlocked.
  }

  // wait waits for the outcome: in occlWait if no other thread owns the
  // request, else for the thread that does. The GIL is not held (torch's
  // bindings release it).
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      if (completed) return;
      TORCH_CHECK(issued, "occl: waiting for a send or receive whose batch has not ended");
      if (!waiting) break;
      cv.wait(l);
    }
    waiting = true;
    occlRequest_t r = req;
    l.unlock();
    finish(lib.occlWait(r));
  }

  // test reports whether the outcome is known, testing the request if no
  // other thread owns it; it never blocks.
  bool test() {
    occlRequest_t r;
    {
      std::lock_guard<std::mutex> l(mu);
      if (completed) return true;
      if (!issued || waiting) return false;
      waiting = true;
      r = req;
    }
    int done = 0;
    occlResult_t res = lib.occlTest(r, &done);
    if (res != occlSuccess || done) {
      finish(res);
      return true;
    }
    {
      std::lock_guard<std::mutex> l(mu);
      waiting = false;
    }
    cv.notify_all();
    return false;
  }

  // publish completes the future once, after the outcome is known.
  void publish() {
    c10::intrusive_ptr<c10::ivalue::Future> f;
    std::exception_ptr e;
    std::vector<at::Tensor> outs;
    {
      std::lock_guard<std::mutex> l(mu);
      if (!completed || !future || published.exchange(true)) return;
      f = future;
      e = error;
      outs = outputs;
    }
    if (e) {
      f->setError(e);
    } else {
      f->markCompleted(c10::IValue(outs));
    }
  }
};

// releaseGIL runs fn with the GIL released if the calling thread holds it
// (a process group or its last work dropped from Python), so that a thread
// fn waits for can take the GIL.
template <typename Fn>
void releaseGIL(Fn fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release r;
    fn();
  } else {
    fn();
  }
}

// Background counts the operations that the backend's own threads hold:
// queued for or handled by a Completer's threads. Those
// threads take the GIL to run a future's Python callbacks and to release
// them and the tensors they hold, and a thread that takes the GIL once
// the interpreter is finalizing is ended by Python (pthread_exit), which
// aborts the process when it unwinds through a destructor and otherwise
// abandons what it was doing. The interpreter's exit therefore waits for
// them first (drain, from an atexit handler of occl.torch).
class Background {
 public:
  static Background& get() {
    static Background* b = new Background();  // never destroyed: Completer threads may outlive every group
    return *b;
  }
  void enter() {
    std::lock_guard<std::mutex> l(mu_);
    n_++;
  }
  void leave() {
    bool none;
    {
      std::lock_guard<std::mutex> l(mu_);
      none = --n_ == 0;
    }
    if (none) cv_.notify_all();
  }
  // drain waits until no operation is held, or until timeout has passed;
  // it returns how many still are.
  int drain(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, timeout, [this] { return n_ == 0; });
    return n_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

// Completer completes the futures of a process group's operations: its
// threads take turns at waiting, in issue order, for the operations whose
// futures were asked for (and for those whose Work was dropped before
// completing, so that their tensors live as long as occl uses them). One
// thread at a time waits (the waiter); once its operation is done it hands
// the turn to an idle thread (starting one if none is idle and more are
// queued) and then completes that operation's future itself, running its
// callbacks. A future so completes on the thread that saw its operation
// end, with no hand-over between the two (a hand-over to another thread
// was a thread wake-up on every future), while callbacks that block (on
// another future, say) never hold up the waiting: a thread is started
// whenever the turn is free and no thread is idle, so they cannot starve
// the others (at::launch's pool has one thread under OMP_NUM_THREADS=1).
// Idle threads end after a while.
class Completer {
 public:
  // overlap says which operations whose futures are asked for are marked
  // as overlapping their caller's computation (OCCL_FUTURE_OVERLAP).
  explicit Completer(Overlap overlap) : overlap_(overlap), q_(std::make_shared<Queue>()) {}

  // overlaps reports whether an operation whose future is being asked for
  // is to be marked as overlapping its caller's computation: always or
  // never as OCCL_FUTURE_OVERLAP says, or, by default, if an operation
  // handed over earlier is still queued or waited for, or was when a future
  // was asked for less than kOverlapMemory ago. A caller that asks for a
  // future while an earlier one is pending does not wait for each as it
  // comes (DDP's backward pass goes on computing), and its next futures
  // likely overlap too, also those asked for once the earlier ones are done,
  // as the first bucket of DDP's next step is; one that waits for each
  // future at once has none pending when it asks for the next, and its
  // waits keep polling.
  bool overlaps() {
    if (overlap_ != Overlap::kAuto) return overlap_ == Overlap::kAlways;
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> l(q_->mu);
    if (q_->waiting || !q_->items.empty()) {
      q_->overlapSeen = now;
      return true;
    }
    return q_->overlapSeen != std::chrono::steady_clock::time_point{} && now - q_->overlapSeen < kOverlapMemory;
  }

  // kOverlapMemory is how long after a future was asked for while an
  // earlier one was pending the futures asked for are marked too (see
  // overlaps): longer than a training step, in most jobs.
  static constexpr std::chrono::seconds kOverlapMemory{2};

  // ~Completer waits until every operation handed over has been waited for
  // (their callbacks may still run), unless it runs on one of the queue's
  // own threads (the last reference to the group went away there): the
  // threads then finish the queue by themselves.
  ~Completer() {
    std::unique_lock<std::mutex> l(q_->mu);
    q_->stop = true;
    q_->cv.notify_all();
    if (current == q_.get()) return;
    l.unlock();
    // A waiter may need the GIL to release a tensor.
    releaseGIL([this] {
      std::unique_lock<std::mutex> l(q_->mu);
      q_->drained.wait(l, [this] { return q_->items.empty() && !q_->waiting; });
    });
  }

  void add(std::shared_ptr<State> s) {
    Background::get().enter();
    bool start = false, wake = false;
    {
      std::lock_guard<std::mutex> l(q_->mu);
      q_->items.push_back(std::move(s));
      // The waiter, when done, hands the turn on; else a starting thread
      // takes it, or an idle one, or a new one.
      if (!q_->waiting && q_->starting == 0) {
        wake = q_->idle > 0;
        start = !wake;
        if (start) q_->starting++;
      }
    }
    if (start) {
      spawn(q_);
    } else if (wake) {
      q_->cv.notify_one();
    }
  }

 private:
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;       // an item to wait for, or stop
    std::condition_variable drained;  // nothing queued, nobody waiting
    std::deque<std::shared_ptr<State>> items;
    bool stop = false;
    bool waiting = false;  // a thread has taken the queue's head and waits for it
    int idle = 0;          // threads waiting on cv
    int starting = 0;      // threads started that have not yet looked at the queue
    // overlapSeen is when a future was last asked for while an earlier
    // one was pending (see overlaps); zero if never.
    std::chrono::steady_clock::time_point overlapSeen{};
  };

  // current is the queue whose thread this is, if any.
  static thread_local Queue* current;

  static void spawn(std::shared_ptr<Queue> q) {
    std::thread([q] { run(q); }).detach();
  }

  static void run(std::shared_ptr<Queue> q) {
    current = q.get();
    std::unique_lock<std::mutex> l(q->mu);
    q->starting--;
    for (;;) {
      while (q->waiting || q->items.empty()) {
        if (q->stop && q->items.empty()) return;
        q->idle++;
        bool turn = q->cv.wait_for(l, std::chrono::seconds(10), [&q] {
          return (!q->waiting && !q->items.empty()) || (q->stop && q->items.empty());
        });
        q->idle--;
        if (!turn) return;  // idle for long
      }
      std::shared_ptr<State> s = std::move(q->items.front());
      q->items.pop_front();
      q->waiting = true;
      l.unlock();
      // A work of a batch not yet issued is dropped: it is handed over
      // again when the batch is issued or fails (failBatch).
      bool publish;
      {
        std::lock_guard<std::mutex> sl(s->mu);
        publish = s->issued;
      }
      if (publish) {
        try {
          s->wait();
        } catch (...) {
        }
      }
      l.lock();
      q->waiting = false;
      bool more = !q->items.empty(), start = more && q->idle + q->starting == 0;
      if (start) q->starting++;
      if (!more) q->drained.notify_all();
      l.unlock();
      if (start) {
        spawn(q);
      } else if (more) {
        q->cv.notify_one();
      }
      // Once only, however often it was handed over (see publish).
      if (publish) s->publish();
      s.reset();
      Background::get().leave();
      l.lock();
    }
  }

  const Overlap overlap_;
  std::shared_ptr<Queue> q_;
};

thread_local Completer::Queue* Completer::current = nullptr;

// OcclWork is what every operation returns: wait, isCompleted and
// getFuture behave as with Gloo, and a failure (a dead rank, a timeout, a
// mismatch) is raised as RuntimeError with occl's message naming the rank.
// Only wait blocks; the accessors read the state, and dropping a work
// hands an operation still in flight to the Completer.
class OcclWork : public c10d::Work {
 public:
  OcclWork(int rank, c10d::OpType type, std::shared_ptr<State> st, std::shared_ptr<Completer> completer)
      : c10d::Work(rank, type), st_(std::move(st)), completer_(std::move(completer)) {}

  ~OcclWork() override {
    bool pending;
    {
      std::lock_guard<std::mutex> l(st_->mu);
      pending = st_->issued && !st_->completed && !st_->future;
    }
    if (pending) completer_->add(st_);
  }

  // isCompleted reports the operation done once its outcome is known and,
  // if its future was asked for, that future completed (by the Completer:
  // as with Gloo, whose work completes its future before it completes).
  bool isCompleted() override { return st_->test() && futureDone(); }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> l(st_->mu);
    return st_->completed && !st_->error;
  }

  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> l(st_->mu);
    return st_->error;
  }

  std::vector<at::Tensor> result() override {
    std::lock_guard<std::mutex> l(st_->mu);
    return st_->outputs;
  }

  // wait waits for the outcome and, if the work's future was asked for,
  // until the Completer has completed it, so that the future is done when
  // wait returns (as with Gloo) while its callbacks run on the Completer's
  // threads, never on this one.
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      st_->wait();
      if (!futureDone()) future()->wait();
    } else {
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!st_->test() || !futureDone()) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "occl: operation timed out after ",
                    timeout.count(), " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> l(st_->mu);
      e = st_->error;
    }
    if (e) std::rethrow_exception(e);
    return true;
  }

  void synchronize() override {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    bool enqueue = false;
    occlRequest_t req = nullptr;
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
      std::lock_guard<std::mutex> l(st_->mu);
      if (!st_->future) {
        st_->future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        enqueue = !st_->completed;
        if (enqueue && st_->issued) req = st_->req;
      }
      f = st_->future;
    }
    if (enqueue) {
      // Asked before the work is handed over, so that it does not count
      // itself. A request completed and released since it was read is
      // refused; it does not matter then (a batch not issued yet is
      // marked when it is).
      if (req != nullptr && completer_->overlaps()) lib.occlRequestOverlap(req);
      completer_->add(st_);
    } else {
      st_->publish();
    }
    return f;
  }

 private:
  // future returns the work's future, if it was asked for.
  c10::intrusive_ptr<c10::ivalue::Future> future() const {
    std::lock_guard<std::mutex> l(st_->mu);
    return st_->future;
  }

  // futureDone reports, once the outcome is known, whether the work's
  // future (if it was asked for) is completed. If not, the Completer
  // completes it: it was handed the work when the future was asked for
  // (again when its batch was issued, or failed: see failBatch).
  bool futureDone() const {
    auto f = future();
    return !f || f->completed();
  }

  std::shared_ptr<State> st_;
  std::shared_ptr<Completer> completer_;
};

// One pending send or receive of a coalesced batch.
struct P2P {
  bool send;
  at::Tensor t;
  int peer;
};

// parseId makes an occlUniqueId of its text form (occl.UniqueId's str).
occlUniqueId parseId(const std::string& text) {
  occlUniqueId id;
  TORCH_CHECK(text.size() < sizeof(id.internal), "occl: unique id too long");
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, text.data(), text.size());
  return id;
}

class ProcessGroupOccl : public c10d::ProcessGroup {
 public:
  // Joins the occl communicator whose id rank 0 made (see occl/torch).
  // fabricRanks are the global ranks of a group made by new_group, empty
  // for the world group.
  ProcessGroupOccl(int rank, int size, const std::string& uniqueId, std::chrono::milliseconds timeout,
                   std::vector<int> fabricRanks)
      : c10d::ProcessGroup(rank, size), completer_(std::make_shared<Completer>(futureOverlap())) {
    occlUniqueId id = parseId(uniqueId);
    occlConfig_t cfg = OCCL_CONFIG_INITIALIZER;
    cfg.timeoutMs = timeout.count();
    if (!fabricRanks.empty()) {
      TORCH_CHECK(static_cast<int>(fabricRanks.size()) == size, "occl: ", fabricRanks.size(),
                  " global ranks for a group of ", size);
      cfg.fabricRanks = fabricRanks.data();
    }
    check(lib.occlCommInitRankConfig(&comm_, size, id, rank, &cfg), "init");
  }

  // Takes over comm, a communicator made by occl (occlCommShrink): rank and
  // size are its own.
  ProcessGroupOccl(occlComm_t comm, int rank, int size)
      : c10d::ProcessGroup(rank, size), comm_(comm), completer_(std::make_shared<Completer>(futureOverlap())) {}

  // Called from Python's deallocation (destroy_process_group) with the GIL
  // held: it is released while the Completer finishes waiting (it may need it
  // to release a tensor) and the communicator is destroyed.
  ~ProcessGroupOccl() override {
    releaseGIL([this] {
      completer_.reset();  // waits for what it holds
      // An aborted communicator is already freed (occlCommAbort).
      if (comm_ != nullptr && !aborted_) lib.occlCommDestroy(comm_);
    });
  }

  const std::string getBackendName() const override { return "occl"; }

  // handle is the occlComm_t, for the Python layer (reconfiguration,
  // traffic matrices).
  uintptr_t handle() const {
    TORCH_CHECK(!aborted_, kAborted);  // occlCommAbort freed it
    return reinterpret_cast<uintptr_t>(comm_);
  }

  // abort fails the communicator at once on this rank (occlCommAbort),
  // which frees it: later operations raise kAborted.
  void abort() {
    if (comm_ != nullptr && !aborted_.exchange(true)) lib.occlCommAbort(comm_);
  }

  // adopt makes a process group of comm, a communicator occl just made.
  static c10::intrusive_ptr<ProcessGroupOccl> adopt(occlComm_t comm, const char* what) {
    int rank = 0, size = 0;
    if (lib.occlCommUserRank(comm, &rank) != occlSuccess || lib.occlCommCount(comm, &size) != occlSuccess) {
      std::string err = lastError();
      lib.occlCommDestroy(comm);
      TORCH_CHECK(false, "occl ", what, ": the new communicator: ", err);
    }
    return c10::make_intrusive<ProcessGroupOccl>(comm, rank, size);
  }

  // join makes the process group that the ranks of a running group make
  // with grow(growId, njoin, ...), as one of its joiners (occlJoinConfig):
  // topology is the grown group's, as its members give it, or empty.
  static c10::intrusive_ptr<ProcessGroupOccl> join(const std::string& growId, const std::string& topology) {
    occlUniqueId id = parseId(growId);
    occlConfig_t cfg = OCCL_CONFIG_INITIALIZER;
    if (!topology.empty()) cfg.topology = topology.c_str();
    occlComm_t nc = nullptr;
    check(lib.occlJoinConfig(&nc, id, &cfg), "join");
    return adopt(nc, "join");
  }

  // grow makes a process group of this group's ranks (keeping their ranks)
  // and njoin processes that call join(growId) (occlCommGrowConfig): every
  // rank calls it; this group stays usable. topology is the grown group's
  // (needed when this group has one), or empty.
  c10::intrusive_ptr<ProcessGroupOccl> grow(const std::string& growId, int njoin, const std::string& topology) {
    TORCH_CHECK(comm_ != nullptr && !aborted_, kAborted);
    occlUniqueId id = parseId(growId);
    occlConfig_t cfg = OCCL_CONFIG_INITIALIZER;
    if (!topology.empty()) cfg.topology = topology.c_str();
    occlComm_t nc = nullptr;
    check(lib.occlCommGrowConfig(comm_, id, njoin, &nc, &cfg), "grow");
    return adopt(nc, "grow");
  }

  // shrink makes a process group of the survivors (occlCommShrink): every
  // rank that is alive and not in exclude calls it, typically after an
  // operation raised because a rank died. This group runs no more
  // operations; the new one has the survivors' ranks in their order here.
  c10::intrusive_ptr<ProcessGroupOccl> shrink(const std::vector<int>& exclude) {
    TORCH_CHECK(comm_ != nullptr && !aborted_, kAborted);
    occlComm_t nc = nullptr;
    check(lib.occlCommShrink(comm_, exclude.empty() ? nullptr : exclude.data(), static_cast<int>(exclude.size()),
                             &nc),
          "shrink");
    return adopt(nc, "shrink");
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto& t = single(tensors, "broadcast");
    checkRoot(opts.rootRank);
    auto dt = dtypeOf(t, false);
    return issue(c10d::OpType::BROADCAST, {t}, {t}, [&](occlRequest_t* r) {
      return lib.occlBroadcastAsync(t.data_ptr(), t.data_ptr(), t.numel(), dt, opts.rootRank, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    auto& t = single(tensors, "all_reduce");
    auto dt = dtypeOf(t, true);
    auto op = redOpOf(opts.reduceOp);
    return issue(c10d::OpType::ALLREDUCE, {t}, {t}, [&](occlRequest_t* r) {
      return lib.occlAllReduceAsync(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    // One flat buffer of all tensors, reduced at once, copied back after.
    TORCH_CHECK(!tensors.empty(), "occl: allreduce_coalesced of no tensors");
    for (auto& t : tensors) {
      checkTensor(t, "allreduce_coalesced");
      checkSameType(t, tensors[0], "allreduce_coalesced");
    }
    auto dt = dtypeOf(tensors[0], true);
    auto op = redOpOf(opts.reduceOp);
    std::vector<at::Tensor> flats;
    for (auto& t : tensors) flats.push_back(t.reshape({-1}));
    auto flat = at::cat(flats);
    auto outs = tensors;
    return issue(
        c10d::OpType::ALLREDUCE_COALESCED, {flat}, tensors,
        [&](occlRequest_t* r) {
          return lib.occlAllReduceAsync(flat.data_ptr(), flat.data_ptr(), flat.numel(), dt, op, comm_, r);
        },
        [flat, outs]() mutable {
          int64_t off = 0;
          for (auto& t : outs) {
            t.view({-1}).copy_(flat.narrow(0, off, t.numel()));
            off += t.numel();
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    auto& t = single(tensors, "reduce");
    checkRoot(opts.rootRank);
    auto dt = dtypeOf(t, true);
    auto op = redOpOf(opts.reduceOp);
    return issue(c10d::OpType::REDUCE, {t}, {t}, [&](occlRequest_t* r) {
      return lib.occlReduceAsync(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, opts.rootRank, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) override {
    auto& in = single(inputs, "all_gather input");
    TORCH_CHECK(outputs.size() == 1, "occl: all_gather: expected 1 output list, got ", outputs.size());
    auto outs = outputs[0];
    checkBlocks(outs, in, "all_gather");
    auto dt = dtypeOf(in, false);
    auto flat = at::empty({getSize() * in.numel()}, in.options());
    return issue(
        c10d::OpType::ALLGATHER, {in, flat}, outs,
        [&](occlRequest_t* r) {
          return lib.occlAllGatherAsync(in.data_ptr(), flat.data_ptr(), in.numel(), dt, comm_, r);
        },
        [flat, outs]() mutable { unflatten(flat, outs); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    checkTensor(in, "all_gather_into_tensor input");
    checkTensor(out, "all_gather_into_tensor output");
    checkSameType(in, out, "all_gather_into_tensor");
    TORCH_CHECK(out.numel() == in.numel() * getSize(), "occl: all_gather_into_tensor: output has ", out.numel(),
                " elements, want ", in.numel() * getSize());
    auto dt = dtypeOf(in, false);
    return issue(c10d::OpType::_ALLGATHER_BASE, {in, out}, {out}, [&](occlRequest_t* r) {
      return lib.occlAllGatherAsync(in.data_ptr(), out.data_ptr(), in.numel(), dt, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override {
    auto& in = single(inputs, "gather input");
    checkRoot(opts.rootRank);
    auto dt = dtypeOf(in, false);
    std::vector<at::Tensor> outs;
    at::Tensor flat;
    if (getRank() == opts.rootRank) {
      TORCH_CHECK(outputs.size() == 1, "occl: gather: expected 1 output list on the root, got ", outputs.size());
      outs = outputs[0];
      checkBlocks(outs, in, "gather");
      flat = at::empty({getSize() * in.numel()}, in.options());
    } else {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "occl: gather: only the root passes an output list");
      flat = at::empty({0}, in.options());
    }
    return issue(
        c10d::OpType::GATHER, {in, flat}, outs,
        [&](occlRequest_t* r) {
          return lib.occlGatherAsync(in.data_ptr(), flat.data_ptr(), in.numel(), dt, opts.rootRank, comm_, r);
        },
        [flat, outs]() mutable { unflatten(flat, outs); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    auto& out = single(outputs, "scatter output");
    checkRoot(opts.rootRank);
    auto dt = dtypeOf(out, false);
    at::Tensor flat;
    if (getRank() == opts.rootRank) {
      TORCH_CHECK(inputs.size() == 1, "occl: scatter: expected 1 input list on the root, got ", inputs.size());
      checkBlocks(inputs[0], out, "scatter");
      flat = flatten(inputs[0]);
    } else {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "occl: scatter: only the root passes an input list");
      flat = at::empty({0}, out.options());
    }
    return issue(c10d::OpType::SCATTER, {flat, out}, {out}, [&](occlRequest_t* r) {
      return lib.occlScatterAsync(flat.data_ptr(), out.data_ptr(), out.numel(), dt, opts.rootRank, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    auto& out = single(outputs, "reduce_scatter output");
    TORCH_CHECK(inputs.size() == 1, "occl: reduce_scatter: expected 1 input list, got ", inputs.size());
    checkBlocks(inputs[0], out, "reduce_scatter");
    auto dt = dtypeOf(out, true);
    auto op = redOpOf(opts.reduceOp);
    auto flat = flatten(inputs[0]);
    return issue(c10d::OpType::REDUCE_SCATTER, {flat, out}, {out}, [&](occlRequest_t* r) {
      return lib.occlReduceScatterAsync(flat.data_ptr(), out.data_ptr(), out.numel(), dt, op, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override {
    checkTensor(in, "reduce_scatter_tensor input");
    checkTensor(out, "reduce_scatter_tensor output");
    checkSameType(in, out, "reduce_scatter_tensor");
    TORCH_CHECK(in.numel() == out.numel() * getSize(), "occl: reduce_scatter_tensor: input has ", in.numel(),
                " elements, want ", out.numel() * getSize());
    auto dt = dtypeOf(out, true);
    auto op = redOpOf(opts.reduceOp);
    return issue(c10d::OpType::_REDUCE_SCATTER_BASE, {in, out}, {out}, [&](occlRequest_t* r) {
      return lib.occlReduceScatterAsync(in.data_ptr(), out.data_ptr(), out.numel(), dt, op, comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits, const c10d::AllToAllOptions&) override {
    checkTensor(in, "all_to_all_single input");
    checkTensor(out, "all_to_all_single output");
    checkSameType(in, out, "all_to_all_single");
    auto dt = dtypeOf(in, false);
    const int n = getSize();
    if (outSplits.empty() && inSplits.empty()) {
      TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "occl: all_to_all_single: ", in.numel(),
                  " input and ", out.numel(), " output elements: both must be equal and a multiple of ", n);
      return issue(c10d::OpType::ALLTOALL_BASE, {in, out}, {out}, [&](occlRequest_t* r) {
        return lib.occlAllToAllAsync(in.data_ptr(), out.data_ptr(), in.numel() / n, dt, comm_, r);
      });
    }
    auto sc = splitCounts(in, inSplits, "input");
    auto rc = splitCounts(out, outSplits, "output");
    auto sd = displs(sc), rd = displs(rc);
    return issue(c10d::OpType::ALLTOALL_BASE, {in, out}, {out}, [&](occlRequest_t* r) {
      return lib.occlAllToAllvAsync(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(), dt,
                                    comm_, r);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    const int n = getSize();
    TORCH_CHECK(static_cast<int>(inputs.size()) == n && static_cast<int>(outputs.size()) == n,
                "occl: all_to_all: expected ", n, " input and output tensors, got ", inputs.size(), " and ",
                outputs.size());
    std::vector<size_t> sc(n), rc(n);
    for (int i = 0; i < n; i++) {
      checkTensor(inputs[i], "all_to_all input");
      checkTensor(outputs[i], "all_to_all output");
      checkSameType(inputs[i], inputs[0], "all_to_all");
      checkSameType(outputs[i], inputs[0], "all_to_all");
      sc[i] = inputs[i].numel();
      rc[i] = outputs[i].numel();
    }
    auto dt = dtypeOf(inputs[0], false);
    auto sd = displs(sc), rd = displs(rc);
    auto sflat = flatten(inputs);
    auto rflat = at::empty({static_cast<int64_t>(rd[n - 1] + rc[n - 1])}, inputs[0].options());
    auto outs = outputs;
    return issue(
        c10d::OpType::ALLTOALL, {sflat, rflat}, outputs,
        [&](occlRequest_t* r) {
          return lib.occlAllToAllvAsync(sflat.data_ptr(), sc.data(), sd.data(), rflat.data_ptr(), rc.data(),
                                        rd.data(), dt, comm_, r);
        },
        [rflat, outs]() mutable { unflatten(rflat, outs); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return issue(c10d::OpType::BARRIER, {}, {}, [&](occlRequest_t* r) { return lib.occlBarrierAsync(comm_, r); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    checkTag(tag);
    return p2p(true, single(tensors, "send"), dst);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    checkTag(tag);
    return p2p(false, single(tensors, "recv"), src);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK(false, "occl: recv from any source is not supported: name the source rank");
  }

  // Sends and receives between startCoalescing and endCoalescing (what
  // batch_isend_irecv does) are posted as one occl group, so an exchange in
  // which every rank sends first cannot deadlock.
  void startCoalescing() override {
    TORCH_CHECK(!batch_, "occl: coalescing already started");
    batch_ = std::make_shared<State>();
    batchOps_.clear();
    batchRefused_ = false;
  }

  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) override {
    TORCH_CHECK(batch_, "occl: endCoalescing without startCoalescing");
    auto st = std::move(batch_);
    auto ops = std::move(batchOps_);
    batch_.reset();
    batchOps_.clear();
    if (batchRefused_) {
      // The refusal is already on its way to the caller.
      batchRefused_ = false;
      failBatch(st, occlSuccess, std::make_exception_ptr(std::runtime_error(kTagged)));
      return;
    }
    std::vector<occlP2POp_t> list;
    for (auto& o : ops) {
      list.push_back(occlP2POp_t{o.send ? 1 : 0, o.t.data_ptr(), static_cast<size_t>(o.t.numel()),
                                 dtypeOf(o.t, false), o.peer});
      st->keep.push_back(o.t);
    }
    if (aborted_) {
      failBatch(st, occlSuccess, std::make_exception_ptr(std::runtime_error(kAborted)));
      std::rethrow_exception(st->error);
    }
    occlRequest_t req = nullptr;
    occlResult_t r = lib.occlSendRecvAsync(list.data(), static_cast<int>(list.size()), comm_, &req);
    bool handOver, asked;
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->issued = true;
      st->req = req;
      // The Completer completes a future asked for within the
      // batch, and keeps the tensors of a batch whose works are all gone.
      handOver = r == occlSuccess && (st->future || st.use_count() == 1);
      asked = r == occlSuccess && st->future;  // a future, before the issue
    }
    if (r != occlSuccess) {
      failBatch(st, r);
      std::rethrow_exception(st->error);
    }
    if (asked && completer_->overlaps()) lib.occlRequestOverlap(req);  // see getFuture
    if (handOver) completer_->add(st);
  }


 private:
  // failBatch ends st, a batch that failed before it was issued, with r or
  // e (see State::finish), and completes the future a work of it was asked
  // for: the Completer dropped the work, unissued, when it was asked.
  void failBatch(const std::shared_ptr<State>& st, occlResult_t r, std::exception_ptr e = nullptr) {
    bool future;
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->issued = true;
      future = st->future != nullptr;
    }
    st->finish(r, e);
    if (future) completer_->add(st);
  }

  // checkTag refuses tags: occl matches sends and receives between two
  // ranks in issue order, as NCCL does, so a tag could not select one.
  // In a batch, the refusal also cancels the batch: endCoalescing (which
  // torch calls on the way out) posts none of it.
  void checkTag(int tag) {
    if (tag != 0 && batch_) batchRefused_ = true;
    TORCH_CHECK(tag == 0, kTagged);
  }

  void checkRoot(int64_t root) const {
    TORCH_CHECK(root >= 0 && root < getSize(), "occl: root ", root, " is not a rank of this group of ", getSize());
  }

  // checkBlocks checks a list of per-rank tensors against one rank's.
  void checkBlocks(const std::vector<at::Tensor>& blocks, const at::Tensor& one, const char* what) const {
    TORCH_CHECK(static_cast<int>(blocks.size()) == getSize(), "occl: ", what, ": expected ", getSize(),
                " tensors, got ", blocks.size());
    for (auto& b : blocks) {
      checkTensor(b, what);
      checkSameType(b, one, what);
      TORCH_CHECK(b.numel() == one.numel(), "occl: ", what, ": tensors of ", b.numel(), " and ", one.numel(),
                  " elements");
    }
  }

  static at::Tensor flatten(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> flats;
    for (auto& t : ts) flats.push_back(t.reshape({-1}));
    return at::cat(flats);
  }

  static void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outs) {
    int64_t off = 0;
    for (auto& t : outs) {
      t.view({-1}).copy_(flat.narrow(0, off, t.numel()));
      off += t.numel();
    }
  }

  // splitCounts turns dim-0 split sizes into element counts per rank.
  std::vector<size_t> splitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) const {
    const int n = getSize();
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    std::vector<size_t> out(n);
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "occl: all_to_all_single: ", what, " has ", rows, " rows, not a multiple of ", n);
      for (auto& c : out) c = static_cast<size_t>(rows / n * row);
      return out;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == n, "occl: all_to_all_single: ", splits.size(), " ", what,
                " split sizes for ", n, " ranks");
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
      TORCH_CHECK(splits[i] >= 0, "occl: all_to_all_single: negative ", what, " split size ", splits[i]);
      sum += splits[i];
      out[i] = static_cast<size_t>(splits[i] * row);
    }
    TORCH_CHECK(sum == rows, "occl: all_to_all_single: ", what, " split sizes add up to ", sum, ", the tensor has ",
                rows, " rows");
    return out;
  }

  static std::vector<size_t> displs(const std::vector<size_t>& counts) {
    std::vector<size_t> d(counts.size());
    size_t off = 0;
    for (size_t i = 0; i < counts.size(); i++) {
      d[i] = off;
      off += counts[i];
    }
    return d;
  }

  c10::intrusive_ptr<c10d::Work> p2p(bool send, at::Tensor& t, int peer) {
    TORCH_CHECK(peer >= 0 && peer < getSize(), "occl: peer ", peer, " is not a rank of this group of ", getSize());
    auto dt = dtypeOf(t, false);
    auto type = send ? c10d::OpType::SEND : c10d::OpType::RECV;
    if (batch_) {
      batchOps_.push_back(P2P{send, t, peer});
      return c10::make_intrusive<OcclWork>(getRank(), type, batch_, completer_);
    }
    return issue(type, {t}, {t}, [&](occlRequest_t* r) {
      return send ? lib.occlSendAsync(t.data_ptr(), t.numel(), dt, peer, comm_, r)
                  : lib.occlRecvAsync(t.data_ptr(), t.numel(), dt, peer, comm_, r);
    });
  }

  // issue starts an operation through start (which calls an occl*Async
  // function) and returns its Work. keep are the tensors it uses, outputs
  // what Work::result and the future give, epilogue the copy-out that runs
  // once it has succeeded. An argument error is raised here, on the calling
  // rank, and nothing is queued: the group stays usable.
  template <typename Start>
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, std::vector<at::Tensor> keep,
                                       std::vector<at::Tensor> outputs, Start start,
                                       std::function<void()> epilogue = nullptr) {
    TORCH_CHECK(!aborted_, kAborted);
    TORCH_CHECK(!batch_ || type == c10d::OpType::SEND || type == c10d::OpType::RECV,
                "occl: only sends and receives may be coalesced");
    auto st = std::make_shared<State>();
    st->keep = std::move(keep);
    st->outputs = std::move(outputs);
    st->epilogue = std::move(epilogue);
    occlRequest_t req = nullptr;
    check(start(&req), opName(type));
    st->req = req;
    st->issued = true;
    return c10::make_intrusive<OcclWork>(getRank(), type, std::move(st), completer_);
  }

  static const char* opName(c10d::OpType t) {
    switch (t) {
      case c10d::OpType::BROADCAST: return "broadcast";
      case c10d::OpType::ALLREDUCE: return "all_reduce";
      case c10d::OpType::ALLREDUCE_COALESCED: return "all_reduce_coalesced";
      case c10d::OpType::REDUCE: return "reduce";
      case c10d::OpType::ALLGATHER: return "all_gather";
      case c10d::OpType::_ALLGATHER_BASE: return "all_gather_into_tensor";
      case c10d::OpType::GATHER: return "gather";
      case c10d::OpType::SCATTER: return "scatter";
      case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
      case c10d::OpType::_REDUCE_SCATTER_BASE: return "reduce_scatter_tensor";
      case c10d::OpType::ALLTOALL_BASE: return "all_to_all_single";
      case c10d::OpType::ALLTOALL: return "all_to_all";
      case c10d::OpType::BARRIER: return "barrier";
      case c10d::OpType::SEND: return "send";
      case c10d::OpType::RECV: return "recv";
      default: return "operation";
    }
  }

  static constexpr const char* kTagged =
      "occl: send/recv tags are not supported; messages match in issue order, as NCCL's do";
  static constexpr const char* kAborted = "occl: the process group was aborted";

  occlComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};  // abort freed comm_
  std::shared_ptr<Completer> completer_;
  std::shared_ptr<State> batch_;
  std::vector<P2P> batchOps_;
  bool batchRefused_ = false;  // an operation of the batch was refused
};

}  // namespace occl_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  py::module::import("torch.distributed");
  m.def("load", &occl_torch::load, "Resolves liboccl.so's functions from the library at path.");
  m.def(
      "drain",
      [](double seconds) {
        return occl_torch::Background::get().drain(
            std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
      },
      py::arg("seconds"), py::call_guard<py::gil_scoped_release>(),
      "Waits up to seconds until the backend's threads hold no operation (no future being completed or "
      "callback released); returns how many they still hold.");
  py::class_<occl_torch::ProcessGroupOccl, c10d::ProcessGroup, c10::intrusive_ptr<occl_torch::ProcessGroupOccl>>(
      m, "ProcessGroupOccl")
      .def(py::init<int, int, const std::string&, std::chrono::milliseconds, std::vector<int>>(), py::arg("rank"),
           py::arg("size"), py::arg("unique_id"), py::arg("timeout"), py::arg("fabric_ranks"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("handle", &occl_torch::ProcessGroupOccl::handle,
                             "The occlComm_t of this group, as an integer.")
      .def("abort", &occl_torch::ProcessGroupOccl::abort, py::call_guard<py::gil_scoped_release>())
      .def("shrink", &occl_torch::ProcessGroupOccl::shrink, py::arg("exclude"),
           py::call_guard<py::gil_scoped_release>(),
           "A process group of the survivors, without the failed ranks and those of exclude (occlCommShrink).")
      .def("grow", &occl_torch::ProcessGroupOccl::grow, py::arg("unique_id"), py::arg("njoin"), py::arg("topology"),
           py::call_guard<py::gil_scoped_release>(),
           "A process group of this group's ranks and njoin joiners (occlCommGrowConfig).")
      .def_static("join", &occl_torch::ProcessGroupOccl::join, py::arg("unique_id"), py::arg("topology"),
                  py::call_guard<py::gil_scoped_release>(),
                  "Joins, as a new rank, the process group the members make with grow (occlJoinConfig).");
}
