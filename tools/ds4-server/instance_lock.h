// instance_lock.h — ds4's single-instance lock (DS4_SERVER.md §3.6): flock(LOCK_EX|LOCK_NB) on
// DS4_LOCK_FILE (default /tmp/ds4.lock), PID written into the file, released by the kernel at exit
// (also on a crash, so there are no stale locks). The path comes from the tool (the one documented
// environment variable), never from library code.
#pragma once

#include <string>

#include "ds4/status.h"

namespace ds4 {

class InstanceLock {
 public:
  InstanceLock() = default;
  ~InstanceLock();
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

  // unavailable("another ds4 process is already running (pid N); refusing to start") when held.
  Status acquire(const std::string& path);

 private:
  int fd_ = -1;
};

}  // namespace ds4
