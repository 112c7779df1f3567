"""tsan_triage.py: a race between two accesses in dgpu's code fails the run; a race where gRPC
or protobuf code (not built with TSan) made an access is counted only.

  cd tests/pylib && python3 -m unittest -v test_tsan_triage
"""

import contextlib
import io
import pathlib
import sys
import tempfile
import unittest

import tsan_triage

# Shortened from real reports of the daemon's TSan build.
OURS = """==================
WARNING: ThreadSanitizer: data race (pid=8424)
  Write of size 8 at 0x7b3800000558 by thread T17:
    #0 dgpu::scheduler::EtcdClient::Post(std::string const&, std::string const&, long, std::atomic<bool> const*) ../src/scheduler/etcd_election.cc:117 (dgpu-scheduler+0x1d8f0b)
    #1 dgpu::scheduler::EtcdElection::Run(std::chrono::duration<long, std::ratio<1l, 1000l> >) ../src/scheduler/etcd_election.cc:237 (dgpu-scheduler+0x1d9c01)
    #2 <null> <null> (libstdc++.so.6+0xd44a2)

  Previous write of size 8 at 0x7b3800000558 by thread T21:
    #0 std::vector<int, std::allocator<int> >::size() const /usr/include/c++/12/bits/stl_vector.h:919 (dgpu-scheduler+0x1d8f00)
    #1 dgpu::scheduler::EtcdClient::KeepAlive(long, long) ../src/scheduler/etcd_election.cc:138 (dgpu-scheduler+0x1d79c7)
    #2 <null> <null> (libstdc++.so.6+0xd44a2)

  Location is heap block of size 216 at 0x7b3800000540 allocated by main thread:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)
    #1 dgpu::scheduler::HaController::Start(bool) ../src/scheduler/replication.cc:280 (dgpu-scheduler+0x1a09a9)

  Thread T17 (tid=8442, running) created by main thread at:
    #0 pthread_create ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1001 (libtsan.so.2+0x5e686)
    #1 dgpu::scheduler::HaController::Start(bool) ../src/scheduler/replication.cc:284 (dgpu-scheduler+0x1a0a57)

SUMMARY: ThreadSanitizer: data race ../src/scheduler/etcd_election.cc:117 in dgpu::scheduler::EtcdClient::Post
==================
"""

THEIRS = """==================
WARNING: ThreadSanitizer: data race (pid=3828)
  Read of size 8 at 0x7b6400030138 by thread T13:
    #0 grpc::internal::CallbackWithSuccessTag::Run(bool) /usr/include/grpcpp/support/callback_common.h:202 (dgpu-scheduler+0xdaf7f)
    #1 <null> <null> (libgrpc++.so.1.51+0x897ba)

  Previous write of size 8 at 0x7b6400030138 by thread T1:
    #0 grpc::internal::CallbackWithSuccessTag::Set(grpc_call*, std::function<void (bool)>, grpc::internal::CompletionQueueTag*, bool) /usr/include/grpcpp/support/callback_common.h:168 (dgpu-scheduler+0xe55a3)
    #1 operator() ../src/scheduler/agent_service.cc:26 (dgpu-scheduler+0xd219a)

SUMMARY: ThreadSanitizer: data race /usr/include/grpcpp/support/callback_common.h:202 in grpc::internal::CallbackWithSuccessTag::Run(bool)
==================
==================
WARNING: ThreadSanitizer: data race (pid=4022)
  Write of size 8 at 0x7b5800002090 by thread T9:
    #0 dgpu::v1::TaskFinishedResponse::Clear() proto/gen/dgpu/v1/scheduler.pb.cc:4223 (dgpu-agent+0x195a0f)
    #1 google::protobuf::MessageLite::ParseFromZeroCopyStream(google::protobuf::io::ZeroCopyInputStream*) <null> (libprotobuf.so.32+0x11f589)

  Previous write of size 8 at 0x7b5800002090 by main thread:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)
    #1 dgpu::agent::AgentSession::SendReports(std::vector<dgpu::agent::TaskExit> const&) ../src/agent/session.cc:396 (dgpu-agent+0x86539)

SUMMARY: ThreadSanitizer: data race proto/gen/dgpu/v1/scheduler.pb.cc:4223 in dgpu::v1::TaskFinishedResponse::Clear()
==================
"""


def triage(*reports):
    """(exit status, printed text) of the script over report files with `reports`."""
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(reports):
            pathlib.Path(tmp, "report.%d" % i).write_text(text)
        out = io.StringIO()
        argv = sys.argv
        sys.argv = ["tsan_triage.py", tmp]
        try:
            with contextlib.redirect_stdout(out):
                status = tsan_triage.main()
        finally:
            sys.argv = argv
        return status, out.getvalue()


class TriageTest(unittest.TestCase):
    def test_race_in_dgpu_code_fails_and_is_printed(self):
        status, text = triage(OURS, THEIRS)
        self.assertEqual(status, 1)
        self.assertIn("3 reports, 1 in dgpu's code, 2 with an access made by", text)
        self.assertIn("etcd_election.cc:117", text)
        self.assertNotIn("callback_common.h:202 (", text)

    def test_races_of_uninstrumented_libraries_are_counted_only(self):
        status, text = triage(THEIRS)
        self.assertEqual(status, 0)
        self.assertIn("2 reports, 0 in dgpu's code, 2 with an access made by", text)
        self.assertIn("grpc::internal::CallbackWithSuccessTag::Run(bool)", text)
        self.assertIn("dgpu::v1::TaskFinishedResponse::Clear()", text)

    def test_no_reports_pass(self):
        self.assertEqual(triage()[0], 0)


if __name__ == "__main__":
    unittest.main()
