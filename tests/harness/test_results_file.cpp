// Results file writer and reader (harness/src/results_file.cpp, results_reader.cpp): values read back
// exactly, path refusals (existing file, --force, unwritable directory), status transitions, series
// shape rules, and the reader's single clear error for garbage, empty, truncated, foreign,
// newer-schema and incomplete files. Serial; each test works in its own temporary directory.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/harness/results_file.hpp"
#include "hzp/harness/results_reader.hpp"

namespace fs = std::filesystem;
using namespace hzp::harness;

namespace {

const SeriesSpec kLoss{"steps/loss", "nats/token", "Mean training loss"};
const SeriesSpec kRankTime{"ranks/step_time_s", "s", "Step time per rank"};
const SeriesSpec kCommBytes{"comm/all_gather/intra/bytes", "bytes", "All-gather bytes per rank"};

class ResultsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("hzp_results_" + std::to_string(::getpid()) + "_" + t->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static RunInfo info() {
    RunInfo i;
    i.argv = {"hzpbench", "run", "--set", "train.steps=3"};
    i.config_toml = "[model]\npreset = \"tiny\"\n[train]\nsteps = 3\n";
    i.world_size = 4;
    i.topology = "4 ranks on 2 nodes x 2";
    i.threads = {{"openblas", std::int64_t{1}}};
    i.data = {{"source", std::string("synthetic")}, {"vocab_size", std::int64_t{64}}};
    return i;
  }
  fs::path dir_;
};

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

// Edits a root attribute with the plain C API, to make files the writer would never write.
void set_root_int(const fs::path& p, const char* name, std::int64_t v) {
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
  H5Aclose(a);
  H5Fclose(f);
}

}  // namespace

TEST_F(ResultsFileTest, AttributesAndSeriesReadBackExactly) {
  const fs::path p = dir_ / "run.h5";
  {
    ResultsWriter w = ResultsWriter::create(p, info(), false);
    w.set_attribute("entropy_floor", 1.0625);
    w.set_attribute("unigram_entropy", 4.1588830833596715);
    w.set_attribute("warmup_steps", std::int64_t{1});
    w.set_attribute("note", std::string("ünïcode ok"));
    w.set_data_provenance("sha256", std::string("abc123"));
    const double losses[] = {5.5, 4.25, 3.125};
    for (double l : losses) w.append(kLoss, l);
    w.append(SeriesSpec{"steps/tokens", "tokens", "Tokens in the step"}, std::int64_t{4096});
    const std::vector<std::int64_t> shape = {2, 3};
    const std::vector<std::int64_t> state = {1, 2, 3, 4, 5, 6};
    w.write_array({"memory/model_state_bytes", "bytes", "Model state per rank"}, shape, state);
    w.set_dataset_attribute("memory/model_state_bytes", "components",
                            std::vector<std::string>{"param", "grad", "m"});
    const std::vector<float> tensor = {0.5f, -1.5f, 2.0f, 3.25f};
    const std::vector<std::int64_t> tshape = {2, 2};
    w.dump_tensor(2, "layers.0.wq", tshape, tensor, "bf16");
    EXPECT_EQ(w.rows("steps/loss"), 3);
    w.finish(RunStatus::ok());
  }
  const ResultsReader r(p);
  EXPECT_EQ(r.schema_version(), kResultsSchemaVersion);
  EXPECT_EQ(r.status().kind(), RunStatus::Kind::ok);
  EXPECT_EQ(r.string_attribute("status"), "ok");
  EXPECT_EQ(r.double_attribute("entropy_floor"), 1.0625);
  EXPECT_EQ(r.double_attribute("unigram_entropy"), 4.1588830833596715);
  EXPECT_EQ(r.int_attribute("warmup_steps"), 1);
  EXPECT_EQ(r.string_attribute("note"), "ünïcode ok");
  EXPECT_EQ(r.int_attribute("world_size"), 4);
  EXPECT_EQ(r.string_attribute("config"), info().config_toml);
  EXPECT_EQ(r.string_attribute("topology"), "4 ranks on 2 nodes x 2");
  EXPECT_EQ(std::get<std::vector<std::string>>(*r.attribute("argv")), info().argv);
  EXPECT_FALSE(r.string_attribute("start_time").empty());
  EXPECT_EQ(r.string_attribute("end_time").size(), 20u);  // 2024-05-01T12:34:56Z
  EXPECT_FALSE(r.string_attribute("lib.hdf5").empty());
  EXPECT_FALSE(r.string_attribute("lib.mpi").empty());
  EXPECT_EQ(r.int_attribute("threads.openblas"), 1);
  const auto data = r.attributes_with_prefix("data.");
  ASSERT_EQ(data.size(), 3u);  // sha256, source, vocab_size (name order)
  EXPECT_EQ(data[0].first, "sha256");
  EXPECT_EQ(std::get<std::string>(data[1].second), "synthetic");
  EXPECT_EQ(std::get<std::int64_t>(data[2].second), 64);

  EXPECT_EQ(r.read_doubles("steps/loss"), (std::vector<double>{5.5, 4.25, 3.125}));
  EXPECT_EQ(r.read_ints("steps/tokens"), (std::vector<std::int64_t>{4096}));
  EXPECT_EQ(r.read_ints("memory/model_state_bytes"), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(
      std::get<std::vector<std::string>>(*r.dataset_attribute("memory/model_state_bytes", "components")),
      (std::vector<std::string>{"param", "grad", "m"}));
  EXPECT_EQ(r.read_doubles("tensors/step_2/layers.0.wq"), (std::vector<double>{0.5, -1.5, 2.0, 3.25}));
  EXPECT_EQ(std::get<std::string>(*r.dataset_attribute("tensors/step_2/layers.0.wq", "source_dtype")),
            "bf16");

  const auto loss = r.dataset("steps/loss");
  ASSERT_TRUE(loss);
  EXPECT_EQ(loss->shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(loss->dtype, "float64");
  EXPECT_EQ(loss->units, "nats/token");
  EXPECT_EQ(loss->description, "Mean training loss");
  EXPECT_EQ(r.dataset("memory/model_state_bytes")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(r.dataset("tensors/step_2/layers.0.wq")->dtype, "float32");
  EXPECT_FALSE(r.dataset("steps/nope"));
  EXPECT_EQ(r.datasets().size(), 4u);
  EXPECT_EQ(r.completed_steps(), 1);  // steps/tokens has one row: the fewest rows of a growing series
}

TEST_F(ResultsFileTest, TwoDimensionalSeriesGrowAlongTheStepAxis) {
  const fs::path p = dir_ / "ranks.h5";
  ResultsWriter w = ResultsWriter::create(p, info(), false);
  std::vector<double> expect;
  std::vector<std::int64_t> expect_bytes;
  for (int s = 0; s < 5; ++s) {
    std::vector<double> row;
    std::vector<std::int64_t> brow;
    for (int rk = 0; rk < 4; ++rk) {
      row.push_back(0.1 * s + 0.01 * rk);
      brow.push_back(1000 * s + rk);
    }
    w.append_row(kRankTime, row);
    w.append_row(kCommBytes, brow);
    expect.insert(expect.end(), row.begin(), row.end());
    expect_bytes.insert(expect_bytes.end(), brow.begin(), brow.end());
  }
  w.flush();
  // Read while the writer is still open: a live run's file is readable after a flush.
  const ResultsReader r(p);
  EXPECT_EQ(r.status().kind(), RunStatus::Kind::running);
  EXPECT_EQ(r.dataset("ranks/step_time_s")->shape, (std::vector<std::int64_t>{5, 4}));
  EXPECT_EQ(r.read_doubles("ranks/step_time_s"), expect);
  EXPECT_EQ(r.dataset("comm/all_gather/intra/bytes")->dtype, "int64");
  EXPECT_EQ(r.read_ints("comm/all_gather/intra/bytes"), expect_bytes);
  EXPECT_EQ(r.completed_steps(), 5);
}

TEST_F(ResultsFileTest, RowsOfDifferentLengthsAreRefused) {
  ResultsWriter w = ResultsWriter::create(dir_ / "r.h5", info(), false);
  const std::vector<double> four = {1, 2, 3, 4}, three = {1, 2, 3};
  w.append_row(kRankTime, four);
  const std::string msg = message_of<hzp::PreconditionError>([&] { w.append_row(kRankTime, three); });
  EXPECT_NE(msg.find("'ranks/step_time_s'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rows of 4 values ([step, 4])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("this append passes 3 values"), std::string::npos) << msg;
  // A [step] series takes no rows, and dtype and units stay those of the first append.
  EXPECT_NE(message_of<hzp::PreconditionError>([&] { w.append(kRankTime, 1.0); }).find("passes one value"),
            std::string::npos);
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              const std::vector<std::int64_t> ints = {1, 2, 3, 4};
              w.append_row(kRankTime, ints);
            }).find("holds float64 values; this append passes int64"),
            std::string::npos);
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              w.append_row(SeriesSpec{"ranks/step_time_s", "ms", "x"}, four);
            }).find("is in 's'; this append says 'ms'"),
            std::string::npos);
  EXPECT_EQ(w.rows("ranks/step_time_s"), 1);
}

TEST_F(ResultsFileTest, BadNamesAndShapesAreRefused) {
  ResultsWriter w = ResultsWriter::create(dir_ / "n.h5", info(), false);
  for (const char* bad : {"steps//loss", "/steps/loss", "steps/", "steps/lo ss", "steps/../x"})
    EXPECT_THROW(w.append(SeriesSpec{bad, "1", "x"}, 1.0), hzp::PreconditionError) << bad;
  w.append(kLoss, 1.0);
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              w.append(SeriesSpec{"steps/loss/x", "1", "x"}, 1.0);
            }).find("'steps/loss' is a dataset, not a group"),
            std::string::npos);
  const std::vector<std::int64_t> shape = {2, 2};
  const std::vector<double> three = {1, 2, 3}, four = {1, 2, 3, 4};
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              w.write_array({"a/b", "1", "x"}, shape, three);
            }).find("has shape [2, 2] = 4 elements but 3 values were given"),
            std::string::npos);
  w.write_array({"a/b", "1", "x"}, shape, four);
  w.write_array({"a/b", "1", "x"}, shape, four);  // same dtype and shape: overwritten
  const std::vector<std::int64_t> other = {4};
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              w.write_array({"a/b", "1", "x"}, other, four);
            }).find("was written before as float64 [2, 2]"),
            std::string::npos);
  EXPECT_NE(message_of<hzp::PreconditionError>([&] {
              w.set_attribute("status", std::string("ok"));
            }).find("is set by the writer itself"),
            std::string::npos);
  EXPECT_THROW(w.set_attribute("bad name", 1.0), hzp::PreconditionError);
  const std::vector<float> t = {1, 2};
  const std::vector<std::int64_t> tshape = {2};
  w.dump_tensor(0, "w", tshape, t);
  EXPECT_NE(
      message_of<hzp::PreconditionError>([&] { w.dump_tensor(0, "w", tshape, t); }).find("already dumped"),
      std::string::npos);
}

TEST_F(ResultsFileTest, ExistingPathIsRefusedUnlessForced) {
  const fs::path p = dir_ / "exists.h5";
  {
    ResultsWriter w = ResultsWriter::create(p, info(), false);
    w.append(kLoss, 1.0);
    w.finish(RunStatus::ok());
  }
  const std::string msg = message_of<hzp::IoError>([&] { ResultsWriter::create(p, info(), false); });
  EXPECT_NE(msg.find("'" + p.string() + "' already exists"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another --out"), std::string::npos) << msg;
  EXPECT_EQ(ResultsReader(p).status().kind(), RunStatus::Kind::ok);  // untouched

  // --force writes beside the old file until the new run publishes: one that ends before (here: destroyed
  // without publish, as a killed or failed run) leaves the old file as it was.
  fs::path partial;
  {
    ResultsWriter w = ResultsWriter::create(p, info(), true);
    partial = w.path();
    EXPECT_NE(partial, p);
    EXPECT_EQ(w.final_path(), p);
  }
  EXPECT_EQ(ResultsReader(p).status().kind(), RunStatus::Kind::ok);  // still the old run
  EXPECT_TRUE(ResultsReader(p).dataset("steps/loss"));
  EXPECT_EQ(ResultsReader(partial).status().kind(), RunStatus::Kind::running);
  {
    ResultsWriter w = ResultsWriter::create(p, info(), true);
    w.publish();
    EXPECT_EQ(w.path(), p);
  }
  const ResultsReader r(p);
  EXPECT_EQ(r.status().kind(), RunStatus::Kind::running);  // a fresh file...
  EXPECT_FALSE(r.dataset("steps/loss"));                   // ...without the old one's data

  EXPECT_NE(
      message_of<hzp::IoError>([&] { ResultsWriter::create(dir_, info(), true); }).find("is a directory"),
      std::string::npos);
}

TEST_F(ResultsFileTest, MissingParentDirectoriesAreCreated) {
  const fs::path p = dir_ / "a" / "b" / "c" / "run.h5";
  { ResultsWriter::create(p, info(), false).finish(RunStatus::ok()); }
  EXPECT_TRUE(fs::exists(p));
  // A parent path running through a regular file cannot be created.
  std::ofstream(dir_ / "plain") << "x";
  const std::string msg =
      message_of<hzp::IoError>([&] { ResultsWriter::create(dir_ / "plain" / "run.h5", info(), false); });
  EXPECT_NE(msg.find("cannot create directory"), std::string::npos) << msg;
}

TEST_F(ResultsFileTest, BadProvenanceKeyLeavesNoFile) {
  RunInfo bad = info();
  bad.data.emplace_back("file name", std::string("x"));
  const fs::path p = dir_ / "bad.h5";
  EXPECT_NE(message_of<hzp::PreconditionError>([&] { ResultsWriter::create(p, bad, false); })
                .find("attribute name 'file name' contains ' '"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(ResultsFileTest, UnwritableDirectoryIsAClearError) {
  // Root ignores permission bits, so as root use sysfs, which refuses new files to everyone.
  fs::path dir = dir_ / "readonly";
  if (::geteuid() == 0) {
    dir = "/sys";
  } else {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  }
  const fs::path p = dir / "run.h5";
  std::string msg;
  try {
    ResultsWriter::create(p, info(), false);
  } catch (const hzp::IoError& e) {
    msg = e.message();
  }
  if (dir == "/sys" && msg.empty()) GTEST_SKIP() << "/sys is writable here; no unwritable directory to test";
  if (dir != "/sys") fs::permissions(dir, fs::perms::owner_all);
  EXPECT_NE(msg.find("cannot write results file '" + p.string() + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + dir.string() + "' is not writable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("choose another --out"), std::string::npos) << msg;
}

TEST_F(ResultsFileTest, StatusTransitions) {
  const fs::path p = dir_ / "status.h5";
  {
    ResultsWriter w = ResultsWriter::create(p, info(), false);
    EXPECT_EQ(ResultsReader(p).string_attribute("status"), "running");
    w.set_status(RunStatus::failed(3, "out of memory on rank 3"));
    const RunStatus s = ResultsReader(p).status();
    EXPECT_EQ(s.kind(), RunStatus::Kind::failed);
    EXPECT_EQ(s.failed_rank(), 3);
    EXPECT_EQ(s.reason(), "out of memory on rank 3");
    EXPECT_EQ(ResultsReader(p).string_attribute("status"), "failed: 3: out of memory on rank 3");
    EXPECT_NE(message_of<hzp::PreconditionError>([&] {
                w.set_status(RunStatus::running());
              }).find("cannot go back to 'running'"),
              std::string::npos);
    EXPECT_THROW(w.finish(RunStatus::running()), hzp::PreconditionError);
    w.finish(RunStatus::diverged());
    EXPECT_TRUE(w.finished());
    EXPECT_NE(message_of<hzp::PreconditionError>([&] { w.append(kLoss, 1.0); }).find("after finish()"),
              std::string::npos);
  }
  const ResultsReader r(p);
  EXPECT_EQ(r.string_attribute("status"), "diverged");
  EXPECT_FALSE(r.string_attribute("end_time").empty());

  // No finish(): the destructor closes the file and leaves `running`, the mark of a run that died.
  const fs::path q = dir_ / "abandoned.h5";
  {
    ResultsWriter w = ResultsWriter::create(q, info(), false);
    w.append(kLoss, 2.0);
  }
  const ResultsReader r2(q);
  EXPECT_EQ(r2.string_attribute("status"), "running");
  EXPECT_EQ(r2.string_attribute("end_time"), "");
  EXPECT_EQ(r2.read_doubles("steps/loss"), std::vector<double>{2.0});
  EXPECT_EQ(RunStatus::parse("failed: 12: a: b").reason(), "a: b");
  EXPECT_EQ(RunStatus::parse("paused").kind(), RunStatus::Kind::unknown);
}

TEST_F(ResultsFileTest, CallsFromAnotherThreadAreRefused) {
  ResultsWriter w = ResultsWriter::create(dir_ / "t.h5", info(), false);
  std::string msg;
  std::thread([&] { msg = message_of<hzp::PreconditionError>([&] { w.append(kLoss, 1.0); }); }).join();
  EXPECT_NE(msg.find("another thread"), std::string::npos) << msg;
  EXPECT_TRUE(w.flush_if_due(0.0));
  EXPECT_FALSE(w.flush_if_due(3600.0));
}

TEST_F(ResultsFileTest, ReaderRejectsMissingEmptyAndGarbageFiles) {
  const fs::path missing = dir_ / "nope.h5";
  EXPECT_NE(message_of<hzp::IoError>([&] {
              ResultsReader r(missing);
            }).find("'" + missing.string() + "' does not exist"),
            std::string::npos);
  const fs::path empty = dir_ / "empty.h5";
  std::ofstream(empty).close();
  EXPECT_NE(message_of<hzp::DataError>([&] { ResultsReader r(empty); }).find("is empty (0 bytes)"),
            std::string::npos);
  const fs::path garbage = dir_ / "garbage.h5";
  {
    std::ofstream out(garbage, std::ios::binary);
    std::mt19937 gen(7);
    for (int i = 0; i < 100000; ++i) out.put(static_cast<char>(gen() & 0xff));
  }
  const std::string msg = message_of<hzp::DataError>([&] { ResultsReader r(garbage); });
  EXPECT_NE(msg.find("'" + garbage.string() + "' is not an HDF5 file"), std::string::npos) << msg;
}

TEST_F(ResultsFileTest, ReaderRejectsTruncatedFile) {
  const fs::path p = dir_ / "cut.h5";
  {
    ResultsWriter w = ResultsWriter::create(p, info(), false);
    std::vector<double> row(64, 1.0);
    for (int s = 0; s < 200; ++s) w.append_row(kRankTime, row);
    w.finish(RunStatus::ok());
  }
  fs::resize_file(p, fs::file_size(p) / 2);
  const std::string msg = message_of<hzp::IoError>([&] { ResultsReader r(p); });
  EXPECT_NE(msg.find("results file '" + p.string() + "' is truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Copy it again"), std::string::npos) << msg;
}

TEST_F(ResultsFileTest, ReaderRejectsUnknownSchemaVersions) {
  const fs::path p = dir_ / "schema.h5";
  ResultsWriter::create(p, info(), false).finish(RunStatus::ok());
  set_root_int(p, "schema_version", kResultsSchemaVersion + 1);
  std::string msg = message_of<hzp::DataError>([&] { ResultsReader r(p); });
  EXPECT_NE(
      msg.find("results file '" + p.string() + "' has schema_version 3, newer than the 2 this hzpbench"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find("read it with the hzpbench that wrote it or a newer one"), std::string::npos) << msg;
  set_root_int(p, "schema_version", 0);
  msg = message_of<hzp::DataError>([&] { ResultsReader r(p); });
  EXPECT_NE(msg.find("schema_version 0, which no hzpbench ever wrote"), std::string::npos) << msg;
  // Version 1 (before `preempted` and first_step) is still read: it is version 2 without either.
  set_root_int(p, "schema_version", 1);
  ResultsReader old(p);
  EXPECT_EQ(old.schema_version(), 1);
  EXPECT_EQ(old.status().kind(), RunStatus::Kind::ok);
}

TEST_F(ResultsFileTest, ReaderRejectsForeignAndIncompleteFiles) {
  // An HDF5 file some other program wrote: no schema_version at all.
  const fs::path foreign = dir_ / "foreign.h5";
  const hid_t f = H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Fclose(f);
  std::string msg = message_of<hzp::DataError>([&] { ResultsReader r(foreign); });
  EXPECT_NE(msg.find("is an HDF5 file but not an hzpbench results file"), std::string::npos) << msg;

  const fs::path p = dir_ / "incomplete.h5";
  ResultsWriter::create(p, info(), false).finish(RunStatus::ok());
  const hid_t g = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(g, 0);
  EXPECT_GE(H5Adelete(g, "config"), 0);
  EXPECT_GE(H5Adelete(g, "status"), 0);
  H5Fclose(g);
  msg = message_of<hzp::DataError>([&] { ResultsReader r(p); });
  EXPECT_NE(msg.find("results file '" + p.string() +
                     "' (schema_version 2) lacks the root attribute(s) 'config', 'status'"),
            std::string::npos)
      << msg;
}
