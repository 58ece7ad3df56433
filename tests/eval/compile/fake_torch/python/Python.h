/* Stands for the Python include directory in the compile tests (never included). */
#error "not a real Python.h"
