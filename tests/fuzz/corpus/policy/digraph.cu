C%:include <fstream>
%:define SPAWN fork
 # define ALSO popen
int x = 0; # define NOT_A_DIRECTIVE getenv
