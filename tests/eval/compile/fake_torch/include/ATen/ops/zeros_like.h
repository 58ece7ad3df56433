/* A stand-in for the real header in the compile tests. */
#pragma once
