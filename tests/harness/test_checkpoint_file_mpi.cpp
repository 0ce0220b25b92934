// The checkpoint file (checkpoint_file.hpp) under mpiexec at 2 and 4 ranks: arrays written by the ranks' runs in
// one slicing read back bit for bit in others (what resharding relies on); the runs must cover every element
// exactly once; an abandoned write leaves the previous checkpoint under the final name; changed bytes, a truncated
// file, another model or tensor table and a missing folder are each refused with one message naming the file.
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hzp/core/error.hpp"
#include "hzp/harness/checkpoint_file.hpp"
#include "mpi_test.hpp"

namespace hzp::test {
namespace {

namespace fs = std::filesystem;
using harness::CheckpointReader;
using harness::CheckpointTensor;
using harness::CheckpointWriter;
using harness::FlatRun;

std::vector<CheckpointTensor> table() {
  return harness::flat_tensor_table({{"embed", {6, 5}}, {"block.w", {7}}, {"head", {3, 4, 2}}});  // 61 elements
}
constexpr std::int64_t kTotal = 61;
constexpr const char* kModel = "test model L=1";

// A folder every rank sees (rank 0 makes it), removed at the end of the test.
struct SharedDir {
  fs::path path;
  SharedDir() {
    std::string p;
    if (world_rank() == 0) {
      char tmpl[] = "/tmp/hzp_ckpt_XXXXXX";
      p = mkdtemp(tmpl);
    }
    std::int64_t n = static_cast<std::int64_t>(p.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    p.resize(static_cast<std::size_t>(n));
    MPI_Bcast(p.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    path = p;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(path);
  }
};

// Slicing A: chunks of 5 elements dealt round-robin over the ranks (several runs per rank, the last one short).
std::vector<FlatRun> round_robin(int rank, int size) {
  std::vector<FlatRun> runs;
  for (std::int64_t c = 0, i = 0; c * 5 < kTotal; ++c, ++i)
    if (c % size == rank) runs.push_back({c * 5, std::min<std::int64_t>(5, kTotal - c * 5)});
  return runs;
}
// Slicing B: one contiguous block per rank, in reverse rank order.
std::vector<FlatRun> reversed_blocks(int rank, int size) {
  const int b = size - 1 - rank;
  return {{kTotal * b / size, kTotal * (b + 1) / size - kTotal * b / size}};
}

float master_value(std::int64_t i) { return 0.5f * static_cast<float>(i) - 3.25f; }
std::uint16_t param_bits(std::int64_t i) { return static_cast<std::uint16_t>(0x3f80 + 37 * i); }

template <typename T, typename F>
std::vector<T> pack(const std::vector<FlatRun>& runs, F value) {
  std::vector<T> out;
  for (const FlatRun& r : runs)
    for (std::int64_t i = r.offset; i < r.offset + r.count; ++i) out.push_back(value(i));
  return out;
}

void write_checkpoint(const fs::path& path, float shift = 0) {
  const int r = world_rank(), w = world_size();
  CheckpointWriter wr(MPI_COMM_WORLD, path, table(), kModel);
  const std::vector<FlatRun> runs = round_robin(r, w);
  const auto master = pack<float>(runs, [&](std::int64_t i) { return master_value(i) + shift; });
  const auto param = pack<std::uint16_t>(runs, param_bits);
  const auto count = pack<std::int64_t>(runs, [](std::int64_t i) { return i * i - 7; });
  wr.write("master", DType::f32, runs, master.data());
  wr.write("param", DType::bf16, runs, param.data());
  wr.write("count", DType::i64, runs, count.data());
  wr.attribute("step", std::int64_t{42});
  wr.attribute("scheduler", std::string("zero3"));
  wr.commit();
}

// Runs `body` on every rank and expects every rank to throw E with all of `needles` in its message.
template <typename E, typename Body>
void expect_refused(Body body, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "rank " << world_rank() << ": nothing was refused";
  } catch (const E& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << "\nmissing: " << n;
  }
}

TEST(CheckpointFile, ArraysWrittenInOneSlicingReadBackBitForBitInAnother) {
  SharedDir dir;
  const fs::path path = dir.path / "step_42.h5";
  write_checkpoint(path);
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_FALSE(fs::exists(fs::path(path.string() + ".partial")));
  const int r = world_rank(), w = world_size();
  CheckpointReader rd(MPI_COMM_WORLD, path, table(), kModel);
  EXPECT_EQ(rd.components().size(), 3u);
  EXPECT_EQ(std::get<std::int64_t>(rd.attribute("step")), 42);
  EXPECT_EQ(std::get<std::string>(rd.attribute("scheduler")), "zero3");
  for (const std::vector<FlatRun>& runs :
       {reversed_blocks(r, w), std::vector<FlatRun>{{0, kTotal}}, std::vector<FlatRun>{}}) {
    const std::int64_t n = [&] { std::int64_t s = 0; for (auto& x : runs) s += x.count; return s; }();
    std::vector<float> master(static_cast<std::size_t>(n));
    std::vector<std::uint16_t> param(master.size());
    std::vector<std::int64_t> count(master.size());
    rd.read("master", DType::f32, runs, master.data());
    rd.read("param", DType::bf16, runs, param.data());
    rd.read("count", DType::i64, runs, count.data());
    EXPECT_EQ(master, pack<float>(runs, master_value));
    EXPECT_EQ(param, pack<std::uint16_t>(runs, param_bits));
    EXPECT_EQ(count, pack<std::int64_t>(runs, [](std::int64_t i) { return i * i - 7; }));
  }
}

TEST(CheckpointFile, RunsMustCoverEveryElementExactlyOnce) {
  SharedDir dir;
  const fs::path path = dir.path / "bad.h5";
  const int r = world_rank(), w = world_size();
  {
    CheckpointWriter wr(MPI_COMM_WORLD, path, table(), kModel);
    std::vector<FlatRun> runs = round_robin(r, w);
    if (r == 0) runs.erase(runs.begin());  // a gap
    const auto v = pack<float>(runs, master_value);
    expect_refused<PreconditionError>([&] { wr.write("master", DType::f32, runs, v.data()); },
                                      {"array 'master'", "56 elements of 61", "exactly one rank"});
    // The same count, but rank 0 writes its first chunk twice and nobody writes the second rank's first chunk.
    runs = round_robin(r, w);
    if (r == 0) runs.push_back(runs.front());
    if (r == 1) runs.erase(runs.begin());
    const auto u = pack<float>(runs, master_value);
    expect_refused<PreconditionError>([&] { wr.write("m", DType::f32, runs, u.data()); },
                                      {"array 'm'", "61 elements of 61 but not each exactly once"});
  }  // never committed
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(fs::path(path.string() + ".partial")));
}

TEST(CheckpointFile, AnAbandonedWriteLeavesThePreviousCheckpoint) {
  SharedDir dir;
  const fs::path path = dir.path / "latest.h5";
  write_checkpoint(path);
  {
    // The next checkpoint to the same name: one array in, then the run dies (here: the writer is dropped).
    CheckpointWriter wr(MPI_COMM_WORLD, path, table(), kModel);
    const std::vector<FlatRun> runs = round_robin(world_rank(), world_size());
    const auto v = pack<float>(runs, [](std::int64_t i) { return master_value(i) + 100; });
    wr.write("master", DType::f32, runs, v.data());
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_TRUE(fs::exists(fs::path(path.string() + ".partial")));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(fs::path(path.string() + ".partial")));
  CheckpointReader rd(MPI_COMM_WORLD, path, table(), kModel);
  std::vector<float> all(kTotal);
  const FlatRun every{0, kTotal};
  rd.read("master", DType::f32, std::span<const FlatRun>(&every, 1), all.data());
  EXPECT_EQ(all, pack<float>({every}, master_value));  // the first checkpoint's values
}

// Flips one byte of array `name`'s data in place (rank 0, with the file closed everywhere).
void flip_a_byte(const fs::path& path, const char* name, std::int64_t element) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, (std::string("state/") + name).c_str(), H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(at, HADDR_UNDEF);
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(at + element * 4 + 1));
    char c = 0;
    io.get(c);
    io.seekp(static_cast<std::streamoff>(at + element * 4 + 1));
    io.put(static_cast<char>(c ^ 0x10));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CheckpointFile, ChangedBytesAreRefusedNamingTheFileAndTheArray) {
  SharedDir dir;
  const fs::path path = dir.path / "flipped.h5";
  write_checkpoint(path);
  flip_a_byte(path, "master", 33);
  expect_refused<DataError>([&] { CheckpointReader rd(MPI_COMM_WORLD, path, table(), kModel); },
                            {path.string(), "array 'master' does not match its checksum"});
}

TEST(CheckpointFile, ATruncatedFileIsRefusedNamingIt) {
  SharedDir dir;
  const fs::path path = dir.path / "cut.h5";
  write_checkpoint(path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::resize_file(path, fs::file_size(path) / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_refused<DataError>([&] { CheckpointReader rd(MPI_COMM_WORLD, path, table(), kModel); },
                            {path.string(), "truncated"});
}

TEST(CheckpointFile, AnotherModelOrTensorTableIsRefused) {
  SharedDir dir;
  const fs::path path = dir.path / "model.h5";
  write_checkpoint(path);
  expect_refused<DataError>([&] { CheckpointReader rd(MPI_COMM_WORLD, path, table(), "another model L=2"); },
                            {path.string(), "another model", kModel, "another model L=2"});
  const auto other = harness::flat_tensor_table({{"embed", {6, 5}}, {"block.w", {8}}, {"head", {3, 4, 2}}});
  expect_refused<DataError>([&] { CheckpointReader rd(MPI_COMM_WORLD, path, other, kModel); },
                            {path.string(), "tensor 1 is block.w [7] there and block.w [8]"});
  // An empty expected model accepts any (tools that only inspect).
  CheckpointReader rd(MPI_COMM_WORLD, path, table(), "");
  EXPECT_EQ(std::get<std::string>(rd.attribute("model")), kModel);
}

TEST(CheckpointFile, AMissingFolderOrFileIsOneMessage) {
  expect_refused<IoError>([&] { CheckpointWriter wr(MPI_COMM_WORLD, "/nonexistent/dir/x.h5", table(), kModel); },
                          {"/nonexistent/dir", "does not exist"});
  expect_refused<IoError>([&] { CheckpointReader rd(MPI_COMM_WORLD, "/nonexistent/x.h5", table(), kModel); },
                          {"/nonexistent/x.h5", "no such file"});
}

}  // namespace
}  // namespace hzp::test
