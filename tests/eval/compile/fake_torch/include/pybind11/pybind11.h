/*
 * A stand-in for pybind11 in the compile tests: just enough declarations for the template's
 * binding.cpp and simple bindings to compile and link. Nothing here runs Python.
 */
#pragma once

#include <string>
#include <utility>

namespace pybind11 {

struct object {
    template <typename... A> object operator()(A &&...) const { return object(); }
    object attr(const char *) const { return object(); }
    template <typename T> T cast() const { return T(); }
    template <typename T> object &operator=(const T &) { return *this; }
};

struct str : object {
    template <typename T> explicit str(const T &) {}
};

struct list : object {
    template <typename T> void append(const T &) {}
};

struct dict : object {
    dict(const object &) {}
    struct item {
        object first, second;
    };
    const item *begin() const { return nullptr; }
    const item *end() const { return nullptr; }
};

struct arg {
    explicit arg(const char *) {}
    template <typename T> arg &operator=(const T &) { return *this; }
};

struct module_ : object {
    template <typename F, typename... Extra> module_ &def(const char *, F &&, const Extra &...)
    {
        return *this;
    }
    static module_ import(const char *) { return module_(); }
    object &doc() { return doc_; }
    object doc_;
};

template <typename T> T reinterpret_borrow(const object &) { return T(); }
inline bool hasattr(const object &, const char *) { return false; }

} // namespace pybind11

#define PYBIND11_MODULE(name, variable)                                                            \
    static void pybind11_init_##name(::pybind11::module_ &);                                       \
    extern "C" __attribute__((visibility("default"))) void *PyInit_##name()                        \
    {                                                                                              \
        ::pybind11::module_ m;                                                                     \
        pybind11_init_##name(m);                                                                   \
        return nullptr;                                                                            \
    }                                                                                              \
    void pybind11_init_##name(::pybind11::module_ &variable)
