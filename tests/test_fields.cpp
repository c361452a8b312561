// The typed schema mechanism (core/fields.h, core/field_kinds.h) on a struct of its own: defaults
// filled in, required keys, ranges and enum names refused naming the key path, unknown keys
// refused, sections, derived defaults, keys written only when set, the rules between keys, and
// the schema the docs print.
#include "core/error.h"
#include "core/field_kinds.h"
#include "test_util.h"

using namespace minidl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

enum class Shade { Light, Dark };

}  // namespace

template <>
struct minidl::EnumNames<Shade> {
  static constexpr EnumName<Shade> values[] = {{Shade::Light, "light"}, {Shade::Dark, "dark"}};
};

namespace {

struct Sample {
  int64_t size;
  int64_t width;
  double rate;
  bool on;
  Shade shade;
  std::string name;
  std::vector<int64_t> dims;
  int64_t every;
  int64_t keep;
};

int64_t width_default(const Sample& s) { return 2 * s.size; }

const Fields<Sample>& sample_fields() {
  static const Fields<Sample> f{
      {integer("size", &Sample::size, kRequired, {1, 100}, "the size"),
       derived(integer("width", &Sample::width, kRequired, {1, 1000}, "twice size unless given"), &Sample::width,
               width_default),
       number("rate", &Sample::rate, 0.5, kUnitInterval, "a rate"), flag("on", &Sample::on, true, "a switch"),
       choice("shade", &Sample::shade, Shade::Light, "a shade"), text("name", &Sample::name, "x", "any", "a name"),
       int_list("dims", &Sample::dims, {1, 9}, "dims"),
       written_when_set(integer("every.steps", &Sample::every, 0, {0, 10}, "a cadence")),
       written_when_set(integer("every.keep", &Sample::keep, 1, {1, 10}, "how many"))},
      [](const Sample& s, const JsonArgs& args) {
        MINIDL_CHECK(s.width >= s.size, args.key_path("width"), ": must be at least size");
      }};
  return f;
}

Sample read(const json& j) {
  JsonArgs args(j, "cfg");
  return read_struct(sample_fields(), args);
}

std::string error_of(const json& j) {
  return test::error_of([&] { read(j); });
}

}  // namespace

TEST_CASE("fields: defaults, derived defaults and the written form", "[fields]") {
  const Sample s = read({{"size", 3}, {"dims", 4}});
  CHECK(s.width == 6);
  CHECK(s.rate == 0.5);
  CHECK(s.on);
  CHECK(s.shade == Shade::Light);
  CHECK(s.name == "x");
  CHECK(s.dims == std::vector<int64_t>{4});
  CHECK(s.every == 0);
  CHECK(s.keep == 1);
  // Every key written back, except the section whose keys are all written only when set.
  const json written = write_fields(sample_fields(), s);
  CHECK(written ==
        json::parse(R"({"size": 3, "width": 6, "rate": 0.5, "on": true, "shade": "light", "name": "x", "dims": [4]})"));
  // The written form reads back to the same values.
  CHECK(write_fields(sample_fields(), read(written)) == written);
  // A section with one key set is written whole.
  const json with_every = write_fields(sample_fields(), read({{"size", 3}, {"dims", 4}, {"every", {{"steps", 5}}}}));
  CHECK(with_every.at("every") == json({{"steps", 5}, {"keep", 1}}));
}

TEST_CASE("fields: errors name the key's path", "[fields]") {
  CHECK(error_of({{"dims", 1}}) == "cfg.size: required key is missing");
  CHECK(error_of({{"size", 0}, {"dims", 1}}) == "cfg.size: expected an integer in 1..100, got 0");
  CHECK(error_of({{"size", 1}, {"dims", 1}, {"rate", 2}}) == "cfg.rate: expected a number in [0, 1], got 2");
  CHECK(error_of({{"size", 1}, {"dims", 1}, {"shade", "pink"}}) ==
        "cfg.shade: expected \"light\" or \"dark\", got \"pink\"");
  CHECK(error_of({{"size", 1}, {"dims", {1, 10}}}) == "cfg.dims: expected integers in 1..9, got [1,10]");
  CHECK(error_of({{"size", 1}, {"dims", 1}, {"every", {{"steps", 11}}}}) ==
        "cfg.every.steps: expected an integer in 0..10, got 11");
  CHECK_THAT(error_of({{"size", 1}, {"dims", 1}, {"every", {{"step", 1}}}}), Contains("cfg.every.step: unknown key"));
  CHECK_THAT(error_of({{"size", 1}, {"dims", 1}, {"colour", 1}}), Contains("cfg.colour: unknown key"));
  CHECK(error_of({{"size", 5}, {"width", 4}, {"dims", 1}}) == "cfg.width: must be at least size");
  CHECK(error_of({{"size", 1}, {"dims", 1}, {"on", 1}}) == "cfg.on: expected true or false, got number");
}

TEST_CASE("fields: the schema lists every key with its type, default, range and meaning", "[fields]") {
  const json schema = fields_schema(field_infos(sample_fields()));
  REQUIRE(schema.size() == sample_fields().keys.size());
  CHECK(schema[0] == json::parse(R"({"name": "size", "type": "int", "required": true, "range": "1..100",
                                    "doc": "the size"})"));
  CHECK(schema[1] == json::parse(R"({"name": "width", "type": "int", "required": false, "range": "1..1000",
                                    "doc": "twice size unless given"})"));
  CHECK(schema[4] == json::parse(R"({"name": "shade", "type": "string", "required": false, "default": "light",
                                    "range": "\"light\" or \"dark\"", "doc": "a shade"})"));
  CHECK(schema[7].at("name") == "every.steps");
}

TEST_CASE("fields: ranges print as messages and docs say them", "[fields]") {
  CHECK(IntRange{1, 65536}.text() == "1..65536");
  CHECK(IntRange{0}.text() == ">= 0");
  CHECK(IntRange{}.text() == "");
  CHECK(Interval{0, true, 1000000, false}.text() == "(0, 1000000]");
  CHECK(Interval{0, true, kUnbounded, false}.text() == "> 0");
  CHECK(kAtLeastZero.text() == ">= 0");
  CHECK(!kUnitInterval.contains(std::nan("")));
}
