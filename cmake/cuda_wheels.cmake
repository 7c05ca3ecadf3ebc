# cuBLAS and cuDNN from NVIDIA's PyPI wheels, for a CUDA toolkit that lacks
# them (this project's build machines: CUDA 13 without cuBLAS/cuDNN).
# `make cuda-libs` unpacks nvidia-cublas and nvidia-cudnn-cu13 under
# ECHO_CUDA_WHEELS_DIR; this file then defines CUDA::cublas and
# CUDA::cublasLt from them, and the cuDNN hints server/profiler uses. The
# libraries keep their versioned names (libcublas.so.13): the plugin links
# them by path and finds them at run time through its build RPATH (or, in a
# bundle, LD_LIBRARY_PATH).
set(ECHO_CUDA_WHEELS_DIR "${CMAKE_BINARY_DIR}/cuda-wheels" CACHE PATH
    "Where `make cuda-libs` unpacked NVIDIA's cuBLAS and cuDNN wheels")
if(CUDAToolkit_FOUND AND NOT TARGET CUDA::cublas)
  set(_echo_wheels "${ECHO_CUDA_WHEELS_DIR}/nvidia")
  set(_echo_cublas_dir "${_echo_wheels}/cu${CUDAToolkit_VERSION_MAJOR}")
  find_path(ECHO_WHEEL_CUBLAS_INCLUDE_DIR cublas_v2.h
      PATHS "${_echo_cublas_dir}/include" NO_DEFAULT_PATH)
  find_file(ECHO_WHEEL_CUBLAS_LIBRARY "libcublas.so.${CUDAToolkit_VERSION_MAJOR}"
      PATHS "${_echo_cublas_dir}/lib" NO_DEFAULT_PATH)
  find_file(ECHO_WHEEL_CUBLASLT_LIBRARY
      "libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}"
      PATHS "${_echo_cublas_dir}/lib" NO_DEFAULT_PATH)
  if(ECHO_WHEEL_CUBLAS_INCLUDE_DIR AND ECHO_WHEEL_CUBLAS_LIBRARY AND
     ECHO_WHEEL_CUBLASLT_LIBRARY)
    foreach(_lib cublas cublasLt)
      string(TOUPPER ${_lib} _upper)
      add_library(CUDA::${_lib} SHARED IMPORTED)
      set_target_properties(CUDA::${_lib} PROPERTIES
          IMPORTED_LOCATION "${ECHO_WHEEL_${_upper}_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES
              "${ECHO_WHEEL_CUBLAS_INCLUDE_DIR};${CUDAToolkit_INCLUDE_DIRS}")
    endforeach()
    message(STATUS "cuBLAS from ${_echo_cublas_dir} (NVIDIA's wheel)")
  endif()
  find_file(ECHO_CUDNN_LIBRARY libcudnn.so.9
      PATHS "${_echo_wheels}/cudnn/lib" NO_DEFAULT_PATH)
  find_path(ECHO_CUDNN_INCLUDE_DIR cudnn.h
      PATHS "${_echo_wheels}/cudnn/include" NO_DEFAULT_PATH)
endif()
