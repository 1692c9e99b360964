// SupervisedThread (kvstore/supervised_thread.h).
#include "kvstore/supervised_thread.h"

#include <exception>
#include <utility>

#include "spdlog/spdlog.h"

namespace kvt {

SupervisedThread::~SupervisedThread() { Join(); }

void SupervisedThread::Start(SupervisedThreadOptions options, std::function<void()> body) {
  options_ = std::move(options);
  health_ = options_.health != nullptr ? options_.health : HealthRegistry::Default();
  id_ = health_->Add(options_.name);
  state_.store(ThreadState::kRunning, std::memory_order_release);
  thread_ = std::thread([this, body = std::move(body)] { Run(body); });
}

void SupervisedThread::Run(const std::function<void()>& body) {
  for (uint32_t attempt = 0;; ++attempt) {
    std::string error;
    try {
      body();
      Report(ThreadState::kStopped, "");
      return;
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "a non-std exception";
    }
    if (attempt < options_.max_restarts) {
      spdlog::error("{} thread threw ({}); restarting it ({} of {})", options_.name, error,
                    attempt + 1, options_.max_restarts);
      health_->CountRestart(id_, error);
      continue;
    }
    spdlog::error("{} thread died: {}", options_.name, error);
    Report(ThreadState::kFailed, error);
    if (options_.on_failure) {
      try {
        options_.on_failure(error);
      } catch (...) {
        spdlog::error("{} thread: its failure handler threw too", options_.name);
      }
    }
    return;
  }
}

void SupervisedThread::Join() {
  if (!thread_.joinable()) return;
  thread_.join();
  health_->Remove(id_);
}

void SupervisedThread::Beat() {
  if (health_ != nullptr) health_->Beat(id_);
}

void SupervisedThread::Report(ThreadState state, std::string error) {
  health_->SetState(id_, state, std::move(error));  // the registry first: state() then
  state_.store(state, std::memory_order_release);   // implies the registry agrees
}

}  // namespace kvt
