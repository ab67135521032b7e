// mtc calibrate (calibrate.c): measures this machine and writes a device profile.
#ifndef MTC_CALIBRATE_H
#define MTC_CALIBRATE_H

// argv[1] is "calibrate"; its flags follow. The process's exit status.
int mtc_calibrate(int argc, char **argv);

#endif
