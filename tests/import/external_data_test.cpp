// Importer tests of external data: loads from the model's folder, never from outside it.
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "tests/import/import_util.h"

namespace terrace::test {
namespace {

namespace fs = std::filesystem;

// A folder holding weights.bin (the floats 1, 2, 3, 4) and a model whose B reads it.
class ExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/terrace_ext_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/model");
    float w[4] = {1, 2, 3, 4};
    write(dir_ + "/model/weights.bin", std::string(reinterpret_cast<const char*>(w), sizeof w));
    write(dir_ + "/outside.bin", std::string(reinterpret_cast<const char*>(w), sizeof w));
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::string model_dir() const { return dir_ + "/model"; }

  // The small model with B stored externally at `location` (bytes from `offset`).
  std::string model(const std::string& location, int64_t offset = 0) const {
    onnx::ModelProto m = parse_model(kSmallModel);
    onnx::TensorProto& b = *m.mutable_graph()->mutable_initializer(0);
    b.clear_float_data();
    b.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const std::string& k, const std::string& v) {
      auto* e = b.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", "12");
    return bytes_of(m);
  }
  // Writes the model into the folder and loads it as a file.
  Model load_file(const std::string& location, int64_t offset = 0) const {
    write(model_dir() + "/model.onnx", model(location, offset));
    return load_onnx_file(model_dir() + "/model.onnx");
  }
  void expect_rejected(const std::string& location, const std::string& part) const {
    expect_load_error(model(location), ErrorCode::InvalidModel, part, model_dir());
  }

  std::string dir_;
};

TEST_F(ExternalData, file_in_the_model_folder_loads) {
  Model m = load_file("weights.bin", 4);
  const Tensor& b = m.graph->initializers.at(m.graph->find_value("B"));
  EXPECT_EQ(b.data<float>()[0], 2.0f);
  EXPECT_EQ(b.data<float>()[2], 4.0f);
}

TEST_F(ExternalData, file_in_a_subfolder_loads) {
  fs::create_directories(model_dir() + "/data");
  fs::copy_file(model_dir() + "/weights.bin", model_dir() + "/data/w.bin");
  EXPECT_NO_THROW(load_file("data/w.bin"));
}

TEST_F(ExternalData, absolute_path_is_rejected) {
  expect_rejected(dir_ + "/outside.bin", "absolute");
}

TEST_F(ExternalData, dot_dot_path_is_rejected) {
  expect_rejected("../outside.bin", "'..'");
  expect_rejected("sub/../../outside.bin", "'..'");
}

TEST_F(ExternalData, symlink_to_a_file_outside_is_rejected) {
  fs::create_symlink(dir_ + "/outside.bin", model_dir() + "/link.bin");
  expect_rejected("link.bin", "symbolic link");
}

TEST_F(ExternalData, symlinked_folder_is_rejected) {
  fs::create_directory_symlink(dir_, model_dir() + "/up");
  expect_rejected("up/outside.bin", "symbolic link");
}

TEST_F(ExternalData, symlink_to_a_file_inside_the_folder_loads) {
  fs::create_symlink("weights.bin", model_dir() + "/link.bin");
  Model m = load_file("link.bin", 4);
  EXPECT_EQ(m.graph->initializers.at(m.graph->find_value("B")).data<float>()[0], 2.0f);
}

// The Hugging Face hub's cache: snapshots/REV/<file> are links to ../../blobs/<hash>.
TEST_F(ExternalData, hugging_face_cache_layout_loads) {
  fs::create_directories(dir_ + "/hf/blobs");
  fs::create_directories(dir_ + "/hf/snapshots/rev1");
  write(dir_ + "/hf/blobs/aaa", model("weights.bin", 4));
  fs::copy_file(model_dir() + "/weights.bin", dir_ + "/hf/blobs/bbb");
  fs::create_symlink("../../blobs/aaa", dir_ + "/hf/snapshots/rev1/model.onnx");
  fs::create_symlink("../../blobs/bbb", dir_ + "/hf/snapshots/rev1/weights.bin");
  Model m = load_onnx_file(dir_ + "/hf/snapshots/rev1/model.onnx");
  const Tensor& b = m.graph->initializers.at(m.graph->find_value("B"));
  EXPECT_EQ(b.data<float>()[0], 2.0f);
  EXPECT_EQ(b.data<float>()[2], 4.0f);
  // Without the model's own link, the blobs folder is outside.
  fs::remove(dir_ + "/hf/snapshots/rev1/model.onnx");
  write(dir_ + "/hf/snapshots/rev1/model.onnx", model("weights.bin", 4));
  try {
    load_onnx_file(dir_ + "/hf/snapshots/rev1/model.onnx");
    ADD_FAILURE() << "a link out of the model's folder was followed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel) << e.what();
    EXPECT_NE(e.message().find("outside the model's folder"), std::string::npos) << e.what();
  }
}

TEST_F(ExternalData, symlink_to_a_fifo_or_a_device_is_rejected) {
  ASSERT_EQ(::mkfifo((model_dir() + "/pipe").c_str(), 0600), 0);
  fs::create_symlink("pipe", model_dir() + "/to_pipe.bin");
  expect_rejected("to_pipe.bin", "not a regular file");
  fs::create_symlink("/dev/zero", model_dir() + "/zero.bin");
  expect_rejected("zero.bin", "symbolic link");
}

TEST_F(ExternalData, hard_link_is_rejected) {
  ASSERT_EQ(::link((dir_ + "/outside.bin").c_str(), (model_dir() + "/hard.bin").c_str()), 0);
  expect_rejected("hard.bin", "hard link");
}

TEST_F(ExternalData, missing_file_is_rejected) {
  expect_rejected("nope.bin", "does not exist");
}

TEST_F(ExternalData, range_past_the_end_of_the_file_is_rejected) {
  expect_load_error(model("weights.bin", 8), ErrorCode::InvalidModel, "past the end", model_dir());
  expect_load_error(model("weights.bin", 100), ErrorCode::InvalidModel, "past the end", model_dir());
}

TEST_F(ExternalData, bytes_without_a_folder_reject_external_data) {
  expect_load_error(model("weights.bin"), ErrorCode::InvalidModel, "not loaded from a folder");
}

}  // namespace
}  // namespace terrace::test
