/* Symbol visibility for libclattn. */
#ifndef CLATTN_EXPORT_H
#define CLATTN_EXPORT_H
#if defined(CLATTN_STATIC)
#define CLATTN_API
#elif defined(_WIN32)
#ifdef CLATTN_BUILDING_LIBRARY
#define CLATTN_API __declspec(dllexport)
#else
#define CLATTN_API __declspec(dllimport)
#endif
#else
#define CLATTN_API __attribute__((visibility("default")))
#endif
#endif
