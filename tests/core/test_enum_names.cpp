// The enum name tables (enum_names.hpp, enum_option.hpp): lookups both ways, the unnamed value, and an option
// declared from a table parsed back through the resolver (an unknown name refused naming the key, the value and
// the choices). A table of the test's own; each layer's test checks its real enums through the option table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hzp/core/enum_names.hpp"
#include "hzp/core/enum_option.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"

namespace hzp {
namespace {

enum class Colour { red, dark_green, blue, unnamed };
constexpr EnumName<Colour> kColourNames[] = {
    {"red", Colour::red}, {"dark-green", Colour::dark_green}, {"blue", Colour::blue}};

// Usable at compile time, so a header's to_string can stay constexpr where it was.
static_assert(name_of(kColourNames, Colour::dark_green) == "dark-green");
static_assert(*value_of(kColourNames, "blue") == Colour::blue);

TEST(EnumNames, LooksUpBothWaysAndSaysWhatIsMissing) {
  EXPECT_EQ(name_of(kColourNames, Colour::red), "red");
  EXPECT_EQ(name_of(kColourNames, Colour::blue), "blue");
  EXPECT_EQ(name_of(kColourNames, Colour::unnamed), "?");
  EXPECT_TRUE(has_name(kColourNames, Colour::dark_green));
  EXPECT_FALSE(has_name(kColourNames, Colour::unnamed));
  EXPECT_EQ(value_of(kColourNames, "dark-green"), Colour::dark_green);
  EXPECT_FALSE(value_of(kColourNames, "dark_green").has_value());  // the enumerator's spelling is not a name
  EXPECT_FALSE(value_of(kColourNames, "?").has_value());
  EXPECT_EQ(names_of(kColourNames), (std::vector<std::string>{"red", "dark-green", "blue"}));
  EXPECT_EQ(names_text(kColourNames), "red, dark-green, blue");
  // Names are literals: the C string a const char* API hands on ends where the name does.
  EXPECT_STREQ(name_of(kColourNames, Colour::dark_green).data(), "dark-green");
}

// An option declared from the table: allowed values and default from it, and every name parses back to its value.
TEST(EnumOption, DeclaredFromTheTableAndReadBackThroughTheResolver) {
  OptionTable t;
  t.add(enum_option_spec("paint.colour", kColourNames, Colour::dark_green, "Paint colour"));
  const OptionSpec& spec = *t.find("paint.colour");
  EXPECT_EQ(spec.allowed, (std::vector<std::string>{"red", "dark-green", "blue"}));
  EXPECT_EQ(std::get<std::string>(spec.default_value), "dark-green");
  EXPECT_EQ(enum_value(resolve_defaults(t), "paint.colour", kColourNames), Colour::dark_green);
  for (const auto& [name, colour] : {std::pair{"red", Colour::red}, std::pair{"dark-green", Colour::dark_green},
                                     std::pair{"blue", Colour::blue}}) {
    ConfigResolver r(t);
    r.add_set(std::string("paint.colour=") + name);
    EXPECT_EQ(enum_value(r.resolve(), "paint.colour", kColourNames), colour) << name;
  }
  try {
    ConfigResolver(t).add_set("paint.colour=green");
    ADD_FAILURE() << "the resolver took an unknown name";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("paint.colour = green"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("red, dark-green, blue"), std::string::npos) << e.message();
  }
}

TEST(EnumOption, ADefaultWithoutANameIsAProgrammingError) {
  EXPECT_THROW(enum_option_spec("paint.colour", kColourNames, Colour::unnamed, "Paint colour"), PreconditionError);
}

}  // namespace
}  // namespace hzp
