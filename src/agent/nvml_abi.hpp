// The few parts of NVML's C ABI the agent uses, declared here because the
// agent neither needs nor may assume a CUDA toolkit (nvml.h) at build
// time: it opens libnvidia-ml.so.1, which the NVIDIA driver installs, at
// run time (agent/nvml). Declarations follow NVML's documented API and
// nvml.h (NVML API Reference Guide, docs.nvidia.com/deploy/nvml-api/:
// "Initialization and Cleanup", "Error reporting", "Device Queries" (ECC,
// retired pages, remapped rows), "Event Handling Methods", and the
// nvmlEventData_t, nvmlReturn_t, nvmlMemoryErrorType_t and
// nvmlEccCounterType_t references). These names, values and layouts are
// part of NVML's stable ABI: versioned functions (_v2) are separate
// symbols, never changed in place.
//
// Only declarations of types and function-pointer types: nothing here is
// linked. The test tree's fake library (test/tools/fake_nvml.cpp) defines
// the functions with these types.
#pragma once

#include <cstdint>

extern "C" {

// nvmlReturn_t: the values the agent tells apart (others are failures).
typedef int nvmlReturn_t;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

// nvmlMemoryErrorType_t
typedef int nvmlMemoryErrorType_t;
constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
// nvmlEccCounterType_t
typedef int nvmlEccCounterType_t;
constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;  // since the driver loaded
// nvmlEnableState_t
typedef int nvmlEnableState_t;
constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

// nvmlEventType bits.
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;

// What nvmlEventSetWait_v2 fills in (the layout since R450, which
// introduced the _v2 wait; eventData is the XID).
typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);
// pciBusId: "domain:bus:device.function" in hex, as in /sys/bus/pci/devices.
typedef nvmlReturn_t (*nvmlDeviceGetHandleByPciBusId_v2_fn)(const char* pciBusId,
                                                            nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetTotalEccErrors_fn)(nvmlDevice_t device,
                                                       nvmlMemoryErrorType_t errorType,
                                                       nvmlEccCounterType_t counterType,
                                                       unsigned long long* eccCounts);
typedef nvmlReturn_t (*nvmlDeviceGetRetiredPagesPendingStatus_fn)(nvmlDevice_t device,
                                                                  nvmlEnableState_t* isPending);
typedef nvmlReturn_t (*nvmlDeviceGetRemappedRows_fn)(nvmlDevice_t device, unsigned int* corrRows,
                                                     unsigned int* uncRows, unsigned int* isPending,
                                                     unsigned int* failureOccurred);
typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t* set);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t device,
                                                    unsigned long long eventTypes,
                                                    nvmlEventSet_t set);
// timeoutms 0: returns at once, NVML_ERROR_TIMEOUT when no event is queued.
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t set, nvmlEventData_t* data,
                                               unsigned int timeoutms);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t set);

}  // extern "C"
