// The option table machinery: registration rules, layering (default < preset < file < --set) with
// origins, TOML flattening, strict --set parsing, every error message's contents, and the list /
// Markdown / TOML views. Uses its own small table, not the project's (that one has its own test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"

namespace hzp {
namespace {

using S = OptionSpec;

OptionTable make_table() {
  OptionTable t("run 'prog list' to see every key");
  t.add(S::enumeration("backend", {"cpu", "cuda"}, "cpu", "Compute backend"));
  t.add(S::integer("topology.world_size", 0, "Ranks; 0 = from MPI").non_negative().with_unit("ranks"));
  t.add(S::integer("topology.ranks_per_node", 0, "Ranks per node; 0 = from the machine").non_negative());
  t.add(S::enumeration("collectives.wait_policy", {"yield", "backoff", "mixed"}, "mixed", "How to wait"));
  t.add(S::real("collectives.timeout_s", 300, "Deadline of every wait").positive().with_unit("s"));
  t.add(S::boolean("links.emulate", false, "Emulate links"));
  t.add(S::real("links.intra.latency_us", 50, "Intra-node latency").non_negative().with_unit("us"));
  t.add(S::enumeration("model.preset", {"custom"}, "custom", "Named model size"));
  t.add(S::integer("model.layers", 12, "Transformer blocks").positive());
  t.add(S::integer("model.dim", 768, "Model width").positive());
  t.add(S::string("model.name", "llama", "Display name"));
  t.add(S::real("train.lr", 3e-4, "Peak learning rate").positive());
  t.add(S::int_list("sched.sizes", {}, "Group sizes").positive());
  t.add(S::string_list("data.files", {}, "Data files"));
  t.add(S::string("debug.throw_at", "", "rank:step at which to throw").hide());
  t.add_preset("model.preset", "tiny", {{"model.layers", 4}, {"model.dim", 64}, {"model.name", "tiny-llama"}},
               "a model for tests");
  t.add_preset("model.preset", "small", {{"model.layers", 8}});
  return t;
}

const OptionTable& table() {
  static const OptionTable t = make_table();
  return t;
}

// A TOML file in the test's temp folder; returns its path.
std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// The ConfigError message of `fn`, or a test failure when it does not throw one.
template <typename F>
std::string config_error(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.message();
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return {};
}

template <typename F>
std::string precondition_error(F&& fn) {
  try {
    fn();
  } catch (const PreconditionError& e) {
    return e.message();
  }
  ADD_FAILURE() << "no PreconditionError thrown";
  return {};
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing \"" << (needle) << "\" in: " << (haystack)

ResolvedConfig resolve_sets(std::initializer_list<const char*> sets) {
  ConfigResolver r(table());
  for (const char* s : sets) r.add_set(s);
  return r.resolve();
}

// ---------------------------------------------------------------------------------------------------
// Precedence and origins
// ---------------------------------------------------------------------------------------------------

TEST(OptionsPrecedence, DefaultsWhenNothingIsGiven) {
  const ResolvedConfig c = resolve_defaults(table());
  EXPECT_EQ(c.get_int("model.layers"), 12);
  EXPECT_EQ(c.get_string("model.preset"), "custom");
  EXPECT_EQ(c.origin("model.layers").source, ValueSource::default_value);
  EXPECT_EQ(c.origin("model.layers").where, "default");
  EXPECT_EQ(c.entries().size(), table().size());
}

TEST(OptionsPrecedence, EachLayerIsObserved) {
  // preset tiny supplies layers=4, dim=64, name=tiny-llama; the file overrides layers and dim; --set
  // overrides dim again. Each key ends at a different layer.
  const std::string path = write_file("prec.toml", "[model]\npreset = \"tiny\"\nlayers = 6\ndim = 32\n");
  ConfigResolver r(table());
  r.add_file(path).add_set("model.dim=16");
  const ResolvedConfig c = r.resolve();

  EXPECT_EQ(c.get_double("train.lr"), 3e-4);  // default
  EXPECT_EQ(c.origin("train.lr").source, ValueSource::default_value);
  EXPECT_EQ(c.get_string("model.name"), "tiny-llama");  // preset
  EXPECT_EQ(c.origin("model.name").source, ValueSource::preset);
  EXPECT_EQ(c.origin("model.name").where, "preset model.preset=tiny");
  EXPECT_EQ(c.get_int("model.layers"), 6);  // file beats preset
  EXPECT_EQ(c.origin("model.layers").source, ValueSource::file);
  EXPECT_EQ(c.origin("model.layers").where, path + ":3:10");
  EXPECT_EQ(c.get_int("model.dim"), 16);  // --set beats file
  EXPECT_EQ(c.origin("model.dim").source, ValueSource::set);
  EXPECT_EQ(c.origin("model.dim").where, "--set");
}

TEST(OptionsPrecedence, PresetChosenByTheFinalValueOfItsKey) {
  const std::string path = write_file("preset.toml", "model.preset = \"tiny\"\n");
  ConfigResolver r(table());
  r.add_file(path).add_set("model.preset=small");
  const ResolvedConfig c = r.resolve();
  EXPECT_EQ(c.get_int("model.layers"), 8);
  EXPECT_EQ(c.get_int("model.dim"), 768);  // small leaves dim alone; tiny's 64 must not leak
  EXPECT_EQ(c.get_string("model.name"), "llama");
}

TEST(OptionsPrecedence, PresetViaSetAloneAndDefaultPresetOverridesNothing) {
  EXPECT_EQ(resolve_sets({"model.preset=tiny"}).get_int("model.layers"), 4);
  EXPECT_EQ(resolve_sets({"model.preset=custom"}).get_int("model.layers"), 12);
}

TEST(OptionsPrecedence, FitUnsetChangesOnlyDefaultsAndPresetsAndSaysWhy) {
  ResolvedConfig c = resolve_sets({"model.preset=tiny", "model.dim=32"});
  EXPECT_EQ(c.preset_value("model.preset", "model.layers"), OptionValue(std::int64_t{4}));
  EXPECT_FALSE(c.preset_value("model.preset", "train.lr"));
  EXPECT_TRUE(c.fit_unset("model.layers", std::int64_t{2}, "halved for the test"));  // from the preset
  EXPECT_EQ(c.get_int("model.layers"), 2);
  EXPECT_EQ(c.origin("model.layers").where, "preset model.preset=tiny, halved for the test");
  EXPECT_TRUE(c.fit_unset("train.lr", 1e-3, "raised"));  // a key default
  EXPECT_EQ(c.origin("train.lr").where, "default, raised");
  EXPECT_FALSE(c.fit_unset("model.dim", std::int64_t{16}, "never"));  // the user's --set stays
  EXPECT_EQ(c.get_int("model.dim"), 32);
}

TEST(OptionsPrecedence, LaterSetAndLaterFileWin) {
  EXPECT_EQ(resolve_sets({"model.layers=2", "model.layers=3"}).get_int("model.layers"), 3);
  const std::string a = write_file("a.toml", "model.layers = 5\nmodel.dim = 8\n");
  const std::string b = write_file("b.toml", "model.layers = 7\n");
  const ResolvedConfig c = ConfigResolver(table()).add_file(a).add_file(b).resolve();
  EXPECT_EQ(c.get_int("model.layers"), 7);
  EXPECT_EQ(c.get_int("model.dim"), 8);
}

// ---------------------------------------------------------------------------------------------------
// TOML files
// ---------------------------------------------------------------------------------------------------

TEST(OptionsToml, NestedTablesFlattenToDottedKeys) {
  const char* forms[] = {
      "[model]\nlayers = 4\n[links.intra]\nlatency_us = 3\n",
      "model.layers = 4\nlinks.intra.latency_us = 3\n",
      "model = { layers = 4 }\nlinks = { intra = { latency_us = 3.0 } }\n",
      "[links]\nintra.latency_us = 3\n[model]\nlayers = 4\n",
  };
  for (const char* text : forms) {
    const ResolvedConfig c = ConfigResolver(table()).add_toml_text(text, "<text>").resolve();
    EXPECT_EQ(c.get_int("model.layers"), 4) << text;
    EXPECT_EQ(c.get_double("links.intra.latency_us"), 3.0) << text;
    EXPECT_EQ(c.origin("model.layers").source, ValueSource::file);
  }
}

TEST(OptionsToml, IntegerAcceptedForFloatKeyButNotTheReverse) {
  const ResolvedConfig c =
      ConfigResolver(table()).add_toml_text("collectives.timeout_s = 10\n", "<t>").resolve();
  EXPECT_EQ(c.get_double("collectives.timeout_s"), 10.0);
  const std::string msg = config_error(
      [] { ConfigResolver(table()).add_toml_text("topology.world_size = 2.0\n", "<t>"); });
  EXPECT_HAS(msg, "topology.world_size");
  EXPECT_HAS(msg, "got a float");
}

TEST(OptionsToml, ListsAndTopLevelKeys) {
  const ResolvedConfig c = ConfigResolver(table())
                               .add_toml_text("backend = \"cuda\"\n[sched]\nsizes = [2, 4]\n[data]\n"
                                              "files = [\"a.bin\", \"b.bin\"]\n",
                                              "<t>")
                               .resolve();
  EXPECT_EQ(c.get_string("backend"), "cuda");
  EXPECT_EQ(c.get_int_list("sched.sizes"), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(c.get_string_list("data.files"), (std::vector<std::string>{"a.bin", "b.bin"}));
}

TEST(OptionsErrors, UnknownKeyInFileNamesFileLineAndSuggestion) {
  const std::string path = write_file("typo.toml", "# a comment\n[topology]\nrank_per_node = 4\n");
  const std::string msg = config_error([&] { ConfigResolver(table()).add_file(path); });
  EXPECT_HAS(msg, path + ":3:1");
  EXPECT_HAS(msg, "unknown key 'topology.rank_per_node'");
  EXPECT_HAS(msg, "Did you mean 'topology.ranks_per_node'?");
  EXPECT_HAS(msg, "run 'prog list' to see every key");
}

TEST(OptionsErrors, UnknownSectionStillSuggests) {
  const std::string msg =
      config_error([] { ConfigResolver(table()).add_toml_text("[topologi]\nworld_size = 2\n", "cfg"); });
  EXPECT_HAS(msg, "cfg:2:1");
  EXPECT_HAS(msg, "'topologi.world_size'");
  EXPECT_HAS(msg, "Did you mean 'topology.world_size'?");
}

TEST(OptionsErrors, FirstErrorInFileOrderIsReported) {
  // toml++ keeps keys sorted; the report must follow the file, not the alphabet.
  const std::string msg = config_error(
      [] { ConfigResolver(table()).add_toml_text("zzz = 1\naaa = 2\n", "cfg"); });
  EXPECT_HAS(msg, "cfg:1:1: unknown key 'zzz'");
}

TEST(OptionsErrors, BadValueInFileNamesFileLineKeyValueAndFix) {
  const std::string path = write_file("bad_value.toml", "[topology]\nworld_size = 2\nranks_per_node = -3\n");
  const std::string msg = config_error([&] { ConfigResolver(table()).add_file(path); });
  EXPECT_HAS(msg, path + ":3:18");
  EXPECT_HAS(msg, "topology.ranks_per_node = -3");
  EXPECT_HAS(msg, "out of range: must be >= 0");
  EXPECT_HAS(msg, "Fix: give an integer >= 0, e.g. topology.ranks_per_node = 0 (the default)");
}

TEST(OptionsErrors, WrongTypeInFile) {
  const std::string msg =
      config_error([] { ConfigResolver(table()).add_toml_text("\n[links]\nemulate = 1\n", "run.toml"); });
  EXPECT_HAS(msg, "run.toml:3:11");
  EXPECT_HAS(msg, "links.emulate = 1");
  EXPECT_HAS(msg, "got an integer");
  EXPECT_HAS(msg, "takes true or false");
  EXPECT_HAS(msg, "Fix: write e.g. links.emulate = false");
}

TEST(OptionsErrors, TableWhereAValueBelongs) {
  const std::string msg = config_error(
      [] { ConfigResolver(table()).add_toml_text("[topology.world_size]\nx = 1\n", "cfg"); });
  EXPECT_HAS(msg, "topology.world_size");
  EXPECT_HAS(msg, "got a table");
}

TEST(OptionsErrors, ListElementOfWrongTypeOrRange) {
  EXPECT_HAS(config_error([] { ConfigResolver(table()).add_toml_text("sched.sizes = [1, \"x\"]\n", "c"); }),
             "got an array holding a string");
  EXPECT_HAS(config_error([] { ConfigResolver(table()).add_toml_text("sched.sizes = [1, 0]\n", "c"); }),
             "element 0 is out of range: each must be > 0");
}

TEST(OptionsErrors, MalformedTomlNamesFileLineColumnAndParserMessage) {
  const std::string path = write_file("broken.toml", "[model]\nlayers = 4\ndim = = 5\n");
  const std::string msg = config_error([&] { ConfigResolver(table()).add_file(path); });
  EXPECT_HAS(msg, path + ":3:");
  EXPECT_HAS(msg, "malformed TOML at line 3, column ");
  // toml++'s own description follows the position.
  const auto colon = msg.find(": ", msg.find("column "));
  ASSERT_NE(colon, std::string::npos);
  EXPECT_GT(msg.size(), colon + 10) << msg;
}

// toml++ says "'9223372036854775808' is not representable in 64 bits" without the key; the quoted line names it.
TEST(OptionsErrors, MalformedTomlQuotesTheLine) {
  const std::string msg =
      config_error([] { ConfigResolver(table()).add_toml_text("[model]\n  layers = 9223372036854775808\n", "x.toml"); });
  EXPECT_HAS(msg, "malformed TOML at line 2, column ");
  EXPECT_HAS(msg, "(`layers = 9223372036854775808`)");
}

TEST(OptionsErrors, UnterminatedTable) {
  const std::string msg = config_error([] { ConfigResolver(table()).add_toml_text("[model\nlayers=1\n", "x.toml"); });
  EXPECT_HAS(msg, "x.toml:1:");
  EXPECT_HAS(msg, "malformed TOML at line 1");
}

TEST(OptionsErrors, MissingFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "no_such_config.toml";
  const std::string msg = config_error([&] { ConfigResolver(table()).add_file(path); });
  EXPECT_HAS(msg, "'" + path + "' does not exist");
  EXPECT_HAS(msg, "Fix: check the path");
}

TEST(OptionsErrors, DirectoryIsNotAConfigFile) {
  EXPECT_HAS(config_error([] { ConfigResolver(table()).add_file(::testing::TempDir()); }),
             "is not a regular file");
}

// ---------------------------------------------------------------------------------------------------
// --set
// ---------------------------------------------------------------------------------------------------

TEST(OptionsSet, ParsesEveryType) {
  const ResolvedConfig c = resolve_sets({"links.emulate=true", "topology.world_size=8", "train.lr=1e-3",
                                         "collectives.timeout_s=5", "model.name=my model",
                                         "collectives.wait_policy=yield", "sched.sizes=1,2,4",
                                         "data.files=[\"x\", \"y\"]", " topology.ranks_per_node = 2 ",
                                         "backend=cuda"});
  EXPECT_TRUE(c.get_bool("links.emulate"));
  EXPECT_EQ(c.get_int("topology.world_size"), 8);
  EXPECT_EQ(c.get_double("train.lr"), 1e-3);
  EXPECT_EQ(c.get_double("collectives.timeout_s"), 5.0);
  EXPECT_EQ(c.get_string("model.name"), "my model");
  EXPECT_EQ(c.get_string("collectives.wait_policy"), "yield");
  EXPECT_EQ(c.get_int_list("sched.sizes"), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(c.get_string_list("data.files"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(c.get_int("topology.ranks_per_node"), 2);
  EXPECT_EQ(c.get_string("backend"), "cuda");
}

TEST(OptionsSet, StringsWithOrWithoutQuotes) {
  EXPECT_EQ(resolve_sets({"model.name=abc"}).get_string("model.name"), "abc");
  EXPECT_EQ(resolve_sets({"model.name=\"abc\""}).get_string("model.name"), "abc");
  EXPECT_EQ(resolve_sets({"model.name='a\\b'"}).get_string("model.name"), "a\\b");
  EXPECT_EQ(resolve_sets({"model.name=\"a\\tb\""}).get_string("model.name"), "a\tb");
  EXPECT_EQ(resolve_sets({"model.name="}).get_string("model.name"), "");
  EXPECT_EQ(resolve_sets({"collectives.wait_policy=\"backoff\""}).get_string("collectives.wait_policy"),
            "backoff");
  EXPECT_HAS(config_error([] { resolve_sets({"model.name=\"abc"}); }), "not closed");
}

TEST(OptionsSet, ListForms) {
  EXPECT_EQ(resolve_sets({"sched.sizes=[1, 2]"}).get_int_list("sched.sizes"), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(resolve_sets({"sched.sizes=[]"}).get_int_list("sched.sizes"), std::vector<std::int64_t>{});
  EXPECT_EQ(resolve_sets({"sched.sizes="}).get_int_list("sched.sizes"), std::vector<std::int64_t>{});
  EXPECT_EQ(resolve_sets({"data.files=a, 'b c'"}).get_string_list("data.files"),
            (std::vector<std::string>{"a", "b c"}));
  EXPECT_HAS(config_error([] { resolve_sets({"sched.sizes=1,x"}); }), "element 'x' is not an integer");
  EXPECT_HAS(config_error([] { resolve_sets({"sched.sizes=1,-2"}); }), "element -2 is out of range");
}

TEST(OptionsSet, IntegersAreStrict) {
  const std::string frac = config_error([] { resolve_sets({"topology.world_size=2.5"}); });
  EXPECT_HAS(frac, "--set topology.world_size=2.5");
  EXPECT_HAS(frac, "'2.5' is not an integer");
  EXPECT_HAS(frac, "topology.world_size takes an integer >= 0");
  EXPECT_HAS(frac, "Fix: give a whole number");

  const std::string word = config_error([] { resolve_sets({"topology.world_size=abc"}); });
  EXPECT_HAS(word, "'abc' is not an integer");

  const std::string sci = config_error([] { resolve_sets({"topology.world_size=1e3"}); });
  EXPECT_HAS(sci, "written as a float");
  EXPECT_HAS(sci, "--set topology.world_size=1000");

  EXPECT_HAS(config_error([] { resolve_sets({"topology.world_size=99999999999999999999"}); }),
             "does not fit in 64 bits");
  EXPECT_HAS(config_error([] { resolve_sets({"topology.world_size="}); }), "is not an integer");
  EXPECT_HAS(config_error([] { resolve_sets({"topology.world_size=0x10"}); }), "is not an integer");
  // TOML's digit separators and an explicit sign are fine.
  EXPECT_EQ(resolve_sets({"model.dim=1_024"}).get_int("model.dim"), 1024);
  EXPECT_EQ(resolve_sets({"model.dim=+5"}).get_int("model.dim"), 5);
}

TEST(OptionsSet, BooleansAndFloatsAreStrict) {
  const std::string b = config_error([] { resolve_sets({"links.emulate=yes"}); });
  EXPECT_HAS(b, "'yes' is not a boolean");
  EXPECT_HAS(b, "--set links.emulate=true or --set links.emulate=false");
  EXPECT_HAS(config_error([] { resolve_sets({"train.lr=fast"}); }), "'fast' is not a number");
  EXPECT_HAS(config_error([] { resolve_sets({"train.lr=1.5x"}); }), "'1.5x' is not a number");
}

TEST(OptionsSet, UnknownKeyWithDidYouMean) {
  const std::string msg = config_error([] { resolve_sets({"topology.rank_per_node=4"}); });
  EXPECT_HAS(msg, "--set topology.rank_per_node=4: unknown key 'topology.rank_per_node'");
  EXPECT_HAS(msg, "Did you mean 'topology.ranks_per_node'?");
  EXPECT_HAS(msg, "Fix: correct the key's name or remove it (run 'prog list' to see every key)");
}

TEST(OptionsSet, UnknownKeyMatchedByLastComponent) {
  EXPECT_HAS(config_error([] { resolve_sets({"ranks_per_node=4"}); }), "Did you mean 'topology.ranks_per_node'?");
  EXPECT_HAS(config_error([] { resolve_sets({"train.timeout_s=4"}); }), "'collectives.timeout_s'");
}

TEST(OptionsSet, UnknownKeyWithNothingClose) {
  const std::string msg = config_error([] { resolve_sets({"completely.different=1"}); });
  EXPECT_HAS(msg, "unknown key 'completely.different'");
  EXPECT_EQ(msg.find("Did you mean"), std::string::npos) << msg;
}

TEST(OptionsSet, OutOfRangeNamesRangeUnitAndFix) {
  const std::string msg = config_error([] { resolve_sets({"collectives.timeout_s=0"}); });
  EXPECT_HAS(msg, "--set collectives.timeout_s=0: collectives.timeout_s = 0 is out of range: must be > 0 (s)");
  EXPECT_HAS(msg, "Fix: give a finite number > 0, e.g. --set collectives.timeout_s=300.0 (the default)");
  EXPECT_HAS(config_error([] { resolve_sets({"train.lr=nan"}); }), "train.lr = nan is not a finite number");
}

// inf satisfies a one-sided range (> 0), yet no key means it: a deadline of inf seconds overflows the clock.
TEST(OptionsSet, InfiniteFloatRefused) {
  const std::string msg = config_error([] { resolve_sets({"collectives.timeout_s=inf"}); });
  EXPECT_HAS(msg, "collectives.timeout_s = inf is not a finite number (s)");
  EXPECT_HAS(msg, "Fix: give a finite number > 0");
  EXPECT_HAS(config_error([] { resolve_sets({"collectives.timeout_s=-inf"}); }), "not a finite number");
}

TEST(OptionsSet, EnumListsAllowedValues) {
  const std::string msg = config_error([] { resolve_sets({"collectives.wait_policy=spin"}); });
  EXPECT_HAS(msg, "collectives.wait_policy = spin is not an allowed value");
  EXPECT_HAS(msg, "Fix: use one of yield, backoff, mixed");
  EXPECT_HAS(config_error([] { resolve_sets({"collectives.wait_policy=yeild"}); }), "did you mean 'yield'?");
  // Preset names are allowed values of their key.
  EXPECT_HAS(config_error([] { resolve_sets({"model.preset=huge"}); }), "use one of custom, tiny, small");
}

TEST(OptionsSet, MissingEqualsSign) {
  const std::string msg = config_error([] { resolve_sets({"topology.world_size"}); });
  EXPECT_HAS(msg, "--set topology.world_size: expected key=value");
  EXPECT_HAS(config_error([] { resolve_sets({"=4"}); }), "expected key=value");
}

TEST(OptionsSet, HiddenKeysAreAccepted) {
  const ResolvedConfig c = resolve_sets({"debug.throw_at=1:3"});
  EXPECT_EQ(c.get_string("debug.throw_at"), "1:3");
}

// ---------------------------------------------------------------------------------------------------
// Getters
// ---------------------------------------------------------------------------------------------------

TEST(OptionsGetters, WrongTypeOrUnknownKeyThrow) {
  const ResolvedConfig c = resolve_defaults(table());
  EXPECT_HAS(precondition_error([&] { c.get_double("model.layers"); }), "the key is of type int");
  EXPECT_HAS(precondition_error([&] { c.get_int("train.lr"); }), "the key is of type float");
  EXPECT_HAS(precondition_error([&] { c.get_bool("model.name"); }), "of type string");
  EXPECT_HAS(precondition_error([&] { c.get_int("model.layer"); }), "did you mean 'model.layers'?");
  EXPECT_EQ(c.get_string("collectives.wait_policy"), "mixed");  // enumerations read as strings
}

// ---------------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------------

TEST(OptionsRegistration, RefusesDuplicatesClashesAndBadDefaults) {
  OptionTable t;
  t.add(S::integer("a.b", 1, "m"));
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("a.b", 1, "m")); }), "registered twice");
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("a.b.c", 1, "m")); }), "clashes with 'a.b'");
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("a", 1, "m")); }), "clashes with 'a.b'");
  EXPECT_NO_THROW(t.add(S::integer("a.bc", 1, "m")));  // a prefix only at a component boundary clashes
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("x.y", -1, "m").non_negative()); }),
             "default -1 is out of range: must be >= 0");
  EXPECT_HAS(precondition_error([&] { t.add(S::enumeration("x.e", {"p", "q"}, "r", "m")); }),
             "not an allowed value");
  EXPECT_HAS(precondition_error([&] { t.add(S::enumeration("x.f", {"p", "p"}, "p", "m")); }), "twice");
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("Bad.Key", 1, "m")); }), "malformed");
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("a..b", 1, "m")); }), "malformed");
  EXPECT_HAS(precondition_error([&] { t.add(S::integer("x.z", 1, "")); }), "meaning");
  EXPECT_HAS(precondition_error([&] { t.add(S::string("x.s", "", "m").positive()); }), "only numeric");
}

TEST(OptionsRegistration, PresetsAreChecked) {
  OptionTable t;
  t.add(S::enumeration("m.preset", {"none"}, "none", "m"));
  t.add(S::integer("m.n", 1, "m").positive());
  t.add(S::real("m.x", 1, "m"));
  t.add(S::integer("m.k", 1, "m"));
  t.add_preset("m.preset", "p", {{"m.n", 2}, {"m.x", 3}});  // an int literal serves a float key
  EXPECT_EQ(std::get<double>(t.find_preset("m.preset", "p")->values.at("m.x")), 3.0);
  EXPECT_EQ(t.find("m.preset")->allowed, (std::vector<std::string>{"none", "p"}));
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.preset", "q", {{"m.nn", 2}}); }), "unknown key 'm.nn'");
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.preset", "q", {{"m.n", 0}}); }), "out of range");
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.preset", "q", {{"m.n", "x"}}); }), "not int");
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.preset", "p", {}); }), "registered twice");
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.n", "q", {}); }), "must be an enumeration");
  EXPECT_HAS(precondition_error([&] { t.add_preset("m.preset", "q", {{"m.preset", "p"}}); }), "do not chain");
}

TEST(OptionsRegistration, RangeTexts) {
  EXPECT_EQ(S::integer("a", 1, "m").non_negative().range_text(), ">= 0");
  EXPECT_EQ(S::real("a", 1, "m").positive().range_text(), "> 0");
  EXPECT_EQ(S::integer("a", 1, "m").in_range(1, 8).range_text(), "[1, 8]");
  EXPECT_EQ(S::real("a", 0.5, "m").above(0).at_most(1).range_text(), "(0, 1]");
  EXPECT_EQ(S::real("a", 0.5, "m").below(1.5).range_text(), "< 1.5");
  EXPECT_EQ(S::enumeration("a", {"x", "y"}, "x", "m").range_text(), "x | y");
  EXPECT_EQ(S::string("a", "", "m").range_text(), "");
}

TEST(OptionsRegistration, SuggestionsAndDistance) {
  EXPECT_EQ(levenshtein_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(levenshtein_distance("", "abc"), 3u);
  EXPECT_EQ(levenshtein_distance("same", "same"), 0u);
  const auto s = table().suggestions("model.layer");
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s[0], "model.layers");
  EXPECT_TRUE(table().suggestions("zzzzzzzz.qqqqqq").empty());
  EXPECT_EQ(table().suggestions("Topology.World_Size").at(0), "topology.world_size");
}

// ---------------------------------------------------------------------------------------------------
// Views: list, Markdown, TOML dump
// ---------------------------------------------------------------------------------------------------

TEST(OptionsViews, ListShowsColumnsGroupsAndHidesHiddenKeys) {
  const std::string list = format_option_list(table());
  EXPECT_HAS(list, "KEY");
  EXPECT_HAS(list, "MEANING");
  EXPECT_HAS(list, "[topology]");
  EXPECT_HAS(list, "[top level]");
  EXPECT_HAS(list, "topology.ranks_per_node");
  EXPECT_HAS(list, "yield | backoff | mixed");
  EXPECT_HAS(list, "Deadline of every wait");
  EXPECT_HAS(list, "model.preset=tiny: a model for tests");
  EXPECT_EQ(list.find("debug.throw_at"), std::string::npos) << list;
  EXPECT_HAS(format_option_list(table(), true), "debug.throw_at");
  // Stable order: sections and keys sorted.
  EXPECT_LT(list.find("collectives.timeout_s"), list.find("collectives.wait_policy"));
  EXPECT_LT(list.find("[links]"), list.find("[model]"));
  EXPECT_LT(list.find("[top level]"), list.find("[collectives]"));
}

TEST(OptionsViews, MarkdownDocumentsEveryKeyIncludingHidden) {
  const std::string md = format_option_markdown(table());
  EXPECT_HAS(md, "## `topology`");
  EXPECT_HAS(md, "| Key | Type | Default | Range | Unit | Meaning |");
  EXPECT_HAS(md, "| `collectives.timeout_s` | float | `300.0` | `> 0` | s | Deadline of every wait |");
  EXPECT_HAS(md, "`yield \\| backoff \\| mixed`");  // a pipe inside a cell is escaped
  EXPECT_HAS(md, "`debug.throw_at`");
  EXPECT_HAS(md, "Hidden from `list`");
  EXPECT_HAS(md, "## Presets");
  EXPECT_HAS(md, "`model.preset=tiny`");
}

TEST(OptionsViews, TomlDumpHasEveryKeyWithOriginsAndParsesBack) {
  ConfigResolver r(table());
  r.add_toml_text("[links.intra]\nlatency_us = 0.30000000000000004\n", "f.toml")
      .add_set("model.preset=tiny")
      .add_set("data.files=a\"q,b")
      .add_set("backend=cuda")
      .add_set("debug.throw_at=0:1");
  const ResolvedConfig c = r.resolve();
  const std::string dump = c.to_toml();
  EXPECT_HAS(dump, "# default");
  EXPECT_HAS(dump, "# --set");
  EXPECT_HAS(dump, "# preset model.preset=tiny");
  EXPECT_HAS(dump, "# f.toml:2:14");
  EXPECT_HAS(dump, "[topology]\n");
  EXPECT_HAS(dump, "intra.latency_us = 0.30000000000000004");
  EXPECT_EQ(dump.rfind("backend = \"cuda\"", 0), 0u) << "top-level keys come before any table:\n" << dump;
  EXPECT_HAS(dump, "debug");  // hidden keys are part of the resolved config

  for (bool with_origins : {true, false}) {
    const ResolvedConfig back =
        ConfigResolver(table()).add_toml_text(c.to_toml(with_origins), "dump").resolve();
    for (const auto& [key, e] : c.entries()) EXPECT_EQ(back.value(key), e.value) << key;
  }
}

TEST(OptionsViews, FormatValue) {
  EXPECT_EQ(format_option_value(OptionValue{50.0}), "50.0");
  EXPECT_EQ(format_option_value(OptionValue{0.004}), "0.004");
  EXPECT_EQ(format_option_value(OptionValue{std::int64_t{-3}}), "-3");
  EXPECT_EQ(format_option_value(OptionValue{std::string("a b")}), "a b");
  EXPECT_EQ(format_option_value(OptionValue{std::string("a\"b")}, true), "\"a\\\"b\"");
  EXPECT_EQ(format_option_value(OptionValue{std::vector<std::int64_t>{1, 2}}), "1,2");
  EXPECT_EQ(format_option_value(OptionValue{std::vector<std::int64_t>{1, 2}}, true), "[1, 2]");
  EXPECT_EQ(format_option_value(OptionValue{std::vector<std::string>{}}), "[]");
}

}  // namespace
}  // namespace hzp
