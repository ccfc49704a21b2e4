// clattn C++ API: one include for everything.
#pragma once
#include "clattn/types.hpp"
#include "clattn/context.hpp"
#include "clattn/diagnostics.hpp"
