/*
 * binding.cpp: the one PYBIND11_MODULE of the workspace's extension `cuda_extension`
 * (read-only infrastructure; do not edit).
 *
 * It adds every function that kernels/NAME_binding.cpp files registered with REGISTER_BINDING.
 * Registration order across translation units is unspecified, so entries are sorted by name
 * to make the module the same from build to build. A mistake in the bindings (two entries with
 * one name, a binding that redefines another's function or defines nothing under its name)
 * fails the import with a message saying what to change, rather than leaving pybind11 to
 * silently chain overloads. Everything here runs once, on the importing thread.
 */
#include "binding_registry.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

const char kListName[] = "_registered";

bool name_less(const cuda_agent::BindingEntry &a, const cuda_agent::BindingEntry &b)
{
    return std::strcmp(a.name, b.name) < 0;
}

/* Sorts the entries by name (nulls are refused first: they cannot be compared). */
void check_and_sort(std::vector<cuda_agent::BindingEntry> &entries)
{
    for (const cuda_agent::BindingEntry &e : entries) {
        if (e.name == nullptr || e.name[0] == '\0')
            throw std::runtime_error("REGISTER_BINDING was given an empty name: pass the name of "
                                     "the Python function the binding defines");
        if (e.fn == nullptr)
            throw std::runtime_error(std::string("REGISTER_BINDING(\"") + e.name +
                                     "\", ...) was given a null function");
        if (std::strcmp(e.name, kListName) == 0)
            throw std::runtime_error(std::string("the binding name \"") + kListName +
                                     "\" is reserved by binding.cpp; pick another name");
    }
    std::stable_sort(entries.begin(), entries.end(), name_less);
    for (size_t i = 1; i < entries.size(); i++) {
        if (std::strcmp(entries[i - 1].name, entries[i].name) == 0)
            throw std::runtime_error(std::string("REGISTER_BINDING(\"") + entries[i].name +
                                     "\", ...) appears more than once: every binding needs its "
                                     "own name; rename one of them (and the m.def inside it)");
    }
}

/*
 * Runs one binding's fn on a scratch module, then moves what it defined into m. Had fn run on m
 * itself, a second m.def of an existing name would quietly become an overload of the first
 * binding's function (pybind11 chains them in place), and the clash would go unnoticed.
 * The scratch module takes m's name, so the functions' __module__ reads "cuda_extension".
 * owners maps each name already in m to the binding that defined it, for messages.
 */
void add_binding(py::module_ &m, const cuda_agent::BindingEntry &e,
                 std::map<std::string, std::string> &owners)
{
    py::object module_type = py::module_::import("types").attr("ModuleType");
    py::module_ scratch = py::reinterpret_borrow<py::module_>(module_type(m.attr("__name__")));
    e.fn(scratch);

    bool defined_own_name = false;
    py::dict defined = scratch.attr("__dict__");
    for (auto item : defined) {
        const std::string key = py::str(item.first).cast<std::string>();
        if (key.rfind("__", 0) == 0)
            continue; /* the module object's own __name__, __doc__, ... */
        if (py::hasattr(m, key.c_str())) {
            auto owner = owners.find(key);
            throw std::runtime_error(
                std::string("binding \"") + e.name + "\" defines \"" + key + "\", which " +
                (owner != owners.end() ? "binding \"" + owner->second + "\" already defined"
                                       : std::string("is reserved in cuda_extension")) +
                "; every Python function must be defined by exactly one binding");
        }
        m.attr(key.c_str()) = item.second;
        owners[key] = e.name;
        defined_own_name = defined_own_name || key == e.name;
    }
    if (!defined_own_name)
        throw std::runtime_error(std::string("binding \"") + e.name +
                                 "\" was registered but defined no function of that name: "
                                 "call m.def(\"" + e.name + "\", ...) in its function");
}

} // namespace

PYBIND11_MODULE(cuda_extension, m)
{
    m.doc() = "CUDA kernels of this workspace, one function per REGISTER_BINDING";

    std::vector<cuda_agent::BindingEntry> entries = cuda_agent::binding_registry();
    check_and_sort(entries);

    /* Defined first, so that no binding can take the name. */
    auto names = std::make_shared<std::vector<std::string>>();
    m.def(
        kListName,
        [names]() {
            py::list out;
            for (const std::string &n : *names)
                out.append(n);
            return out;
        },
        "Names passed to REGISTER_BINDING, sorted (for debugging).");

    std::map<std::string, std::string> owners;
    for (const cuda_agent::BindingEntry &e : entries) {
        add_binding(m, e, owners);
        names->emplace_back(e.name);
    }
}
