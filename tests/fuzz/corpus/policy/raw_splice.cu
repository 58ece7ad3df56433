Cconst char *s = R"x( )\
x" ')x"; int y = fork(); //';
