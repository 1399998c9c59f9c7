// The communication stream behind two-batch overlap: tasks run on another thread, in submission order, and each
// Wait returns its own task's status.
#include "dist/comm_stream.h"

#include <atomic>
#include <future>
#include <vector>

#include <gtest/gtest.h>

namespace deepinfer::dist {
namespace {

TEST(CommStreamTest, RunsTasksInSubmissionOrderAndReturnsEachStatus) {
  CommStream stream("test");
  std::vector<int> order;
  std::vector<CommStream::Ticket> tickets;
  for (int i = 0; i < 50; ++i)
    tickets.push_back(stream.Submit([&order, i] {
      order.push_back(i);  // only the stream's thread writes: no lock needed, order is the point
      return i % 7 == 3 ? InvalidArgument("task " + std::to_string(i)) : Status::Ok();
    }));
  for (int i = 0; i < 50; ++i) {
    const Status s = stream.Wait(tickets[i]);
    EXPECT_EQ(s.ok(), i % 7 != 3) << i;
    if (!s.ok()) {
      EXPECT_NE(s.ToString().find("task " + std::to_string(i)), std::string::npos) << s.ToString();
    }
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(CommStreamTest, SubmitDoesNotWaitForTheTask) {
  // The task blocks until the submitter, after Submit returned, releases it: Submit running the task inline
  // would deadlock here (the test would time out), so passing proves the task runs on the stream's thread.
  CommStream stream("test");
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> ran{false};
  const auto t = stream.Submit([released, &ran] {
    released.wait();
    ran = true;
    return Status::Ok();
  });
  EXPECT_FALSE(ran.load());
  release.set_value();
  EXPECT_TRUE(stream.Wait(t).ok());
  EXPECT_TRUE(ran.load());
  EXPECT_GE(stream.exposed_seconds(), 0.0);
}

TEST(CommStreamTest, DestructionFinishesQueuedTasks) {
  std::atomic<int> done{0};
  {
    CommStream stream("test");
    for (int i = 0; i < 20; ++i) stream.Submit([&done] { ++done; return Status::Ok(); });
  }
  EXPECT_EQ(done.load(), 20);
}

}  // namespace
}  // namespace deepinfer::dist
