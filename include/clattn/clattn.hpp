// clattn C++ API: one include for everything.
#pragma once
#include "clattn/clattn.h"
#include "clattn/types.hpp"
#include "clattn/context.hpp"
#include "clattn/diagnostics.hpp"
#include "clattn/metadata.hpp"
#include "clattn/extend.hpp"
#include "clattn/linear.hpp"
#include "clattn/mla.hpp"
#include "clattn/ops.hpp"
#include "clattn/backend.hpp"
